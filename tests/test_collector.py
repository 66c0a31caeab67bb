"""koi.collector: the collector's thresholds for a long run, and the process's own after."""

from __future__ import annotations

import gc

import pytest

from koi.collector import RELAXED_THRESHOLDS, relaxed_collector
from koi.errors import KoiError


def test_the_thresholds_hold_inside_and_the_processs_own_come_back_after() -> None:
    before = gc.get_threshold()
    with relaxed_collector():
        assert gc.get_threshold() == RELAXED_THRESHOLDS
        with relaxed_collector((5_000, 20, 20)):  # nested: the outer setting comes back
            assert gc.get_threshold() == (5_000, 20, 20)
        assert gc.get_threshold() == RELAXED_THRESHOLDS
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), relaxed_collector():
        raise RuntimeError("a failed run")
    assert gc.get_threshold() == before


@pytest.mark.parametrize("bad", [(0, 10, 10), (700, 10), (700.0, 10, 10), (True, 10, 10)])
def test_bad_thresholds_are_refused_by_name(bad: tuple[int, int, int]) -> None:
    before = gc.get_threshold()
    with pytest.raises(KoiError, match="thresholds"), relaxed_collector(bad):
        pass
    assert gc.get_threshold() == before
