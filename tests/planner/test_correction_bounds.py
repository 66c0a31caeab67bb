"""How far one window can move a correction: the step times and the p99 latency factors no
further below 1 than ``CorrectionConfig.min_factor``, everything within ``max_factor``."""

from __future__ import annotations

import attrs
import pytest

from koi.config import CorrectionConfig
from koi.planner._corrections import DECODE_TIME, PREFILL_TIME, CorrectionStore
from koi.types import Mediator, Outcome

KEY = "H100-SXM|dense-m|vllm|Qwen3-32B|tp4"


def _factor(variable: str, observed: float, predicted: float, cc: CorrectionConfig) -> float:
    store = CorrectionStore().record([(KEY, variable, 1.0, observed, predicted)], cc)
    factor = store.factor(KEY, variable, cc)
    assert factor is not None
    return factor


@pytest.mark.parametrize(
    "variable", [DECODE_TIME, PREFILL_TIME, Outcome.TTFT.value, Outcome.TPOT.value]
)
def test_no_window_makes_a_step_or_a_latency_many_times_faster(variable: str) -> None:
    # A window twenty times faster than predicted (a prediction past saturation the world
    # served steadily) moves the factor to the floor, not to 1/20.
    cc = CorrectionConfig()
    assert _factor(variable, 1.0, 20.0, cc) == cc.min_factor == 0.5
    assert _factor(variable, 15.0, 20.0, cc) == pytest.approx(0.75)  # above it: as measured
    assert _factor(variable, 100.0, 1.0, cc) == cc.max_factor  # slower: up to max_factor
    looser = attrs.evolve(cc, min_factor=0.1)
    assert _factor(variable, 1.0, 20.0, looser) == pytest.approx(0.1)


def test_a_mediator_still_goes_down_to_one_over_max_factor() -> None:
    cc = CorrectionConfig()
    # A batch 200 times smaller than predicted (the floor of 0.5 added to both).
    factor = _factor(Mediator.MEAN_BATCH.value, 0.0, 200.0, cc)
    assert factor == pytest.approx(1.0 / cc.max_factor)
