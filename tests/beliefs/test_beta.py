"""Beta beliefs and the uncertainty U."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.beliefs import Beta, uncertainty
from koi.errors import InvalidInput

counts = st.floats(0.05, 1e4)


def test_uniform_prior_has_unit_uncertainty() -> None:
    assert uncertainty(1, 1) == 1.0
    assert Beta().uncertainty == 1.0
    assert Beta.uniform() == Beta(1, 1)
    assert Beta().confidence == 0.5
    assert Beta().evidence == 0.0


@given(counts, counts)
def test_u_matches_twelve_times_the_variance(a: float, b: float) -> None:
    n = a + b
    variance = a * b / (n * n * (n + 1))
    assert uncertainty(a, b) == pytest.approx(12 * variance)
    assert 0 < uncertainty(a, b) <= 3.0


@given(st.floats(0.05, 0.95), st.floats(2.0, 1e3), st.floats(1.01, 10.0))
def test_u_falls_as_evidence_grows_at_fixed_confidence(c: float, n: float, k: float) -> None:
    small, large = Beta(c * n, (1 - c) * n), Beta(c * n * k, (1 - c) * n * k)
    assert small.confidence == pytest.approx(large.confidence)
    assert large.uncertainty < small.uncertainty


@given(counts, counts, st.floats(0, 50), st.floats(0, 50))
def test_updates_add_evidence(a: float, b: float, s: float, c: float) -> None:
    updated = Beta(a, b).updated(s, c)
    assert (updated.alpha, updated.beta) == (pytest.approx(a + s), pytest.approx(b + c))
    if s >= 0.01 and c == 0:
        assert updated.confidence > Beta(a, b).confidence


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "1"])
def test_invalid_parameters_raise(bad: object) -> None:
    with pytest.raises(InvalidInput):
        Beta(bad, 1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        Beta().updated(-1.0, 0.0)
