"""Risk band, breach probability, residual history and ε calibration."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.beliefs import Stratum
from koi.errors import InvalidInput
from koi.risk import (
    EpsilonCalibrator,
    ResidualHistory,
    RiskBand,
    RiskConfig,
    band,
    breach_probability,
    calibrate_epsilon,
    combine_breach,
    relative_residual,
)
from koi.types import Mediator, Outcome

S = Stratum("H100-SXM", "dense-s", "vllm")
units = st.floats(0.0, 1.0)


def test_band_formula_with_a_long_history() -> None:
    rng = np.random.default_rng(0)
    r = rng.normal(0.05, 0.1, 5000)
    cfg = RiskConfig(prior_strength=1e-9)  # switch the prior off to check the formula
    b = band(200.0, r, 0.5, cfg=cfg)
    q05, q95 = np.quantile(r, [0.05, 0.95])
    s = np.std(r, ddof=1)
    assert b.upper == pytest.approx(200 + 200 * (q95 + 2 * 0.5 * s))
    assert b.lower == pytest.approx(200 + 200 * (q05 - 2 * 0.5 * s))
    assert b.center == 200.0


def test_no_history_gives_the_prior_band_that_widens_with_uncertainty() -> None:
    known = band(100.0, [], 0.3, prior_uncertainty=0.0)
    unknown = band(100.0, [], 0.3, prior_uncertainty=1.0)
    assert unknown.width > known.width
    assert known.lower < 100 < known.upper
    assert (unknown.upper - 100) == pytest.approx(100 - unknown.lower)


@given(units, units, st.integers(0, 30))
def test_band_width_is_monotone_in_uncertainty(u1: float, u2: float, n: int) -> None:
    r = np.random.default_rng(n).normal(0, 0.05, n)
    lo, hi = sorted((u1, u2))
    assert (
        band(50.0, r, 0.3, prior_uncertainty=lo).width
        <= band(50.0, r, 0.3, prior_uncertainty=hi).width + 1e-9
    )


def test_history_shrinks_the_prior() -> None:
    rng = np.random.default_rng(1)
    r = rng.normal(0, 0.02, 200)
    short = band(100.0, r[:3], 0.3, prior_uncertainty=1.0)
    long = band(100.0, r, 0.3, prior_uncertainty=1.0)
    assert long.width < short.width


@given(st.floats(0, 3), st.floats(0, 3))
def test_band_width_is_monotone_in_eps(e1: float, e2: float) -> None:
    r = np.random.default_rng(2).normal(0, 0.1, 50)
    lo, hi = sorted((e1, e2))
    assert band(10.0, r, lo).width <= band(10.0, r, hi).width + 1e-12


@given(
    st.floats(1.0, 1e4),
    st.floats(0.0, 0.5),
    st.floats(-1e4, 1e4),
    st.floats(-1e4, 1e4),
    st.booleans(),
)
def test_breach_is_monotone_in_the_gap(
    center: float, rel_width: float, b1: float, b2: float, upper_is_bad: bool
) -> None:
    rb = RiskBand(center * (1 - rel_width), center * (1 + rel_width), center)
    lo, hi = sorted((b1, b2))
    p_lo = breach_probability(rb, lo, upper_is_bad=upper_is_bad)
    p_hi = breach_probability(rb, hi, upper_is_bad=upper_is_bad)
    assert 0.0 <= p_lo <= 1.0
    if upper_is_bad:  # a looser latency bound is never riskier
        assert p_hi <= p_lo
    else:  # a higher throughput floor is never safer
        assert p_hi >= p_lo


def test_breach_at_the_band_edges() -> None:
    rb = RiskBand(80.0, 120.0, 100.0)
    assert breach_probability(rb, 120.0, upper_is_bad=True) == pytest.approx(0.05)
    assert breach_probability(rb, 80.0, upper_is_bad=False) == pytest.approx(0.05)
    assert breach_probability(rb, 100.0, upper_is_bad=True) == pytest.approx(0.5)
    point = RiskBand(5.0, 5.0, 5.0)
    assert breach_probability(point, 6.0, upper_is_bad=True) == 0.0
    assert breach_probability(point, 4.0, upper_is_bad=True) == 1.0
    assert breach_probability(rb, math.inf, upper_is_bad=True) == 0.0
    with pytest.raises(InvalidInput):
        breach_probability(rb, math.nan, upper_is_bad=True)


@given(st.lists(st.floats(0.0, 1.0), max_size=6))
def test_combined_breach(ps: list[float]) -> None:
    p = combine_breach(ps)
    assert p == pytest.approx(1 - math.prod(1 - q for q in ps))
    assert max(ps, default=0.0) - 1e-12 <= p <= min(1.0, sum(ps)) + 1e-12


def test_combined_breach_rejects_non_probabilities() -> None:
    with pytest.raises(InvalidInput):
        combine_breach([0.5, 1.5])


def _coverage_run(seed: int, eps0: float, *, calibrate: bool, steps: int = 2500) -> float:
    """Heavy-tailed residuals whose scale drifts up; a 30-residual history lags behind."""
    rng = np.random.default_rng(seed)
    cfg = RiskConfig(eps0=eps0)
    eps, hist, covered = eps0, [], []
    for t in range(steps):
        r = (0.1 + 0.2 * t / steps) * rng.standard_t(4)
        b = band(100.0, hist[-30:], eps, prior_uncertainty=0.2, cfg=cfg)
        hit = b.contains(100.0 * (1 + r))
        covered.append(hit)
        if calibrate:
            eps = calibrate_epsilon(eps, [hit], cfg)
        hist.append(r)
    return float(np.mean(covered[500:]))


@pytest.mark.parametrize(("seed", "eps0"), [(0, 0.0), (1, 0.3), (2, 3.0)])
def test_calibrated_eps_reaches_target_coverage(seed: int, eps0: float) -> None:
    assert abs(_coverage_run(seed, eps0, calibrate=True) - 0.90) <= 0.03


def test_without_calibration_coverage_misses_the_target() -> None:
    assert _coverage_run(0, 0.0, calibrate=False) < 0.85
    assert _coverage_run(0, 1.5, calibrate=False) > 0.95


def test_calibration_direction_and_bounds() -> None:
    cfg = RiskConfig()
    assert calibrate_epsilon(0.3, [False] * 3, cfg) > 0.3
    assert calibrate_epsilon(0.3, [True] * 3, cfg) < 0.3
    assert calibrate_epsilon(0.3, [True] * 9 + [False], cfg) == pytest.approx(0.3)
    assert calibrate_epsilon(0.0, [True] * 10, cfg) == cfg.eps_min
    assert calibrate_epsilon(cfg.eps_max, [False] * 10, cfg) == cfg.eps_max


def test_calibrator_tracks_coverage_and_round_trips() -> None:
    cal = EpsilonCalibrator.start()
    assert cal.eps == RiskConfig().eps0
    assert math.isnan(cal.coverage)
    cal = cal.update([True, True, False, True])
    assert cal.coverage == 0.75
    assert EpsilonCalibrator.from_data(json.loads(json.dumps(cal.to_data()))) == cal
    with pytest.raises(InvalidInput, match="epsilon"):
        EpsilonCalibrator.from_data({"eps": -1, "hits": 0, "outcomes": 0})


def test_relative_residuals_and_history() -> None:
    assert relative_residual(110.0, 100.0) == pytest.approx(0.1)
    assert relative_residual(1.0, 0.0, floor=0.5) == 2.0
    with pytest.raises(InvalidInput):
        relative_residual(math.nan, 1.0)
    h = ResidualHistory(window=3)
    for obs in (101.0, 102.0, 103.0, 104.0):
        h = h.add(S, Outcome.TTFT, obs, 100.0)
    h = h.add_residual(S, Mediator.QUEUE_DEPTH, -0.5)
    assert h.get(S, Outcome.TTFT) == pytest.approx((0.02, 0.03, 0.04))
    assert h.get(S, "p99_ttft_ms") == h.get(S, Outcome.TTFT)
    assert h.get(S, Outcome.TPOT) == ()
    again = ResidualHistory.from_data(json.loads(json.dumps(h.to_data())))
    assert again == h
    assert hash(again) == hash(h)
    with pytest.raises(InvalidInput, match="residual_history"):
        ResidualHistory.from_data({"window": 3})
    with pytest.raises(InvalidInput):
        h.add_residual(S, Outcome.TTFT, math.inf)


def test_invalid_band_inputs() -> None:
    with pytest.raises(InvalidInput):
        band(math.nan, [], 0.3)
    with pytest.raises(InvalidInput):
        band(1.0, [math.nan], 0.3)
    with pytest.raises(InvalidInput):
        band(1.0, [], -0.1)
    with pytest.raises(InvalidInput):
        band(1.0, [], 0.1, prior_uncertainty=2.0)
    with pytest.raises(InvalidInput):
        RiskBand(2.0, 1.0, 1.5)
    with pytest.raises(InvalidInput):
        RiskConfig(eps0=5.0)


@given(
    items=st.lists(
        st.tuples(
            st.sampled_from([S, Stratum("L40S", "dense-m", "vllm")]),
            st.sampled_from([Outcome.TTFT, Mediator.KV_CACHE_UTIL, "p99_tpot_ms"]),
            st.floats(-5, 5),
        ),
        max_size=30,
    )
)
def test_batched_residuals_equal_one_at_a_time(
    items: list[tuple[Stratum, object, float]],
) -> None:
    one = ResidualHistory(window=4)
    for stratum, objective, r in items:
        one = one.add_residual(stratum, objective, r)
    assert ResidualHistory(window=4).add_residuals(items) == one
    with pytest.raises(InvalidInput, match="finite"):
        ResidualHistory().add_residuals([*items, (S, Outcome.TTFT, math.nan)])
