"""CUSUM: false alarms, detection delay, outliers, quadrants (seeded, < 10 s)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.cusum import (
    CusumConfig,
    CusumState,
    Detector,
    Quadrant,
    classify,
    cusum_step,
    robust_sigma,
)
from koi.errors import InvalidInput

CFG = CusumConfig()


def _alarms(x: np.ndarray, sigma: float, cfg: CusumConfig = CFG) -> list[int]:
    state, out = CusumState(), []
    for i, r in enumerate(x):
        state = cusum_step(state, float(r), sigma, cfg)
        if state.alarm:
            out.append(i)
    return out


def test_false_alarms_at_most_one_per_200_samples() -> None:
    rng = np.random.default_rng(20260101)
    # σ̂ is the robust scale of an in-control reference history, as in deployment.
    alarms = samples = 0
    for _ in range(40):
        sigma = robust_sigma(rng.normal(0, 1, 128), CFG.sigma_floor)
        alarms += len(_alarms(rng.normal(0, 1, 2500), sigma))
        samples += 2500
    assert alarms / samples <= 1 / 200


def test_detector_false_alarms_at_most_one_per_200_samples() -> None:
    # The detector re-estimates σ̂ from its own window at every step.
    rng = np.random.default_rng(7)
    cfg = CusumConfig(prior_sigma=1.0)
    alarms = samples = 0
    for _ in range(12):
        detector = Detector(cfg=cfg).feed(rng.normal(0, 1, 3000))
        alarms += detector.state.alarms
        samples += 3000
    assert alarms / samples <= 1 / 200


def _delay(x_before: np.ndarray, x_after: np.ndarray, detector: Detector) -> int:
    detector = detector.feed(x_before)
    seen = detector.state.alarms
    for i, r in enumerate(x_after, start=1):
        detector = detector.step(float(r))
        if detector.state.alarms > seen:
            return i
    return len(x_after) + 1


def test_one_sigma_shift_detected_within_15_samples_on_average() -> None:
    rng = np.random.default_rng(11)
    delays = []
    for _ in range(300):
        sigma = robust_sigma(rng.normal(0, 1, 128), CFG.sigma_floor)
        hits = _alarms(rng.normal(1.0, 1.0, 200), sigma)
        delays.append(hits[0] + 1 if hits else 201)
    assert float(np.mean(delays)) <= 15


def test_detector_catches_one_sigma_shift_within_15_samples_on_average() -> None:
    rng = np.random.default_rng(12)
    cfg = CusumConfig(prior_sigma=1.0)
    delays = [
        _delay(rng.normal(0, 1, 40), rng.normal(1.0, 1, 100), Detector(cfg=cfg)) for _ in range(80)
    ]
    assert float(np.mean(delays)) <= 15


@given(st.floats(-1e6, 1e6).filter(lambda z: abs(z) >= 5.0), st.integers(0, 30))
def test_a_lone_outlier_never_alarms_on_its_own(size: float, where: int) -> None:
    x = np.zeros(60)
    x[where] = size
    assert _alarms(x, 1.0) == []
    assert not Detector(cfg=CusumConfig(prior_sigma=1.0)).feed(x).diverged


def test_a_lone_five_sigma_outlier_in_noise_barely_matters() -> None:
    rng = np.random.default_rng(13)
    with_outlier = without = 0
    for _ in range(400):
        noise = rng.normal(0, 1, 20)
        spiked = noise.copy()
        spiked[0] = 5.0
        with_outlier += bool(_alarms(spiked, 1.0))
        without += bool(_alarms(noise, 1.0))
    # Within 20 samples the outlier adds at most a few points of alarm probability.
    assert with_outlier / 400 <= without / 400 + 0.05


def test_a_persistent_shift_in_either_direction_alarms() -> None:
    up = _alarms(np.full(20, 1.0), 1.0)
    down = _alarms(np.full(20, -1.0), 1.0)
    assert up
    assert down
    assert cusum_step(CusumState(s_plus=3.9), 1.0, 1.0).direction == 1
    assert cusum_step(CusumState(s_minus=-3.9), -1.0, 1.0).direction == -1


def test_state_restarts_after_an_alarm_and_counts() -> None:
    state = cusum_step(CusumState(s_plus=3.9), 2.0, 1.0)
    assert state.alarm
    after = cusum_step(state, 0.0, 1.0)
    assert (after.s_plus, after.alarm, after.alarms, after.n) == (0.0, False, 1, 2)


def test_multipliers_are_configurable() -> None:
    x = np.full(60, 0.6)
    assert _alarms(x, 1.0) == [40]  # 0.1 per step crosses h = 4 on the 41st
    assert not _alarms(x, 1.0, CusumConfig(k=0.7))
    assert len(_alarms(np.full(30, 1.0), 1.0, CusumConfig(h=2.0))) > len(
        _alarms(np.full(30, 1.0), 1.0)
    )


@pytest.mark.parametrize(
    ("mediators", "outcomes", "quadrant"),
    [
        (False, False, Quadrant.Q1),
        (False, True, Quadrant.Q2),
        (True, False, Quadrant.Q3),
        (True, True, Quadrant.Q4),
    ],
)
def test_quadrants(mediators: bool, outcomes: bool, quadrant: Quadrant) -> None:
    assert classify(mediators, outcomes) is quadrant
    assert quadrant.mediators_match is not mediators
    assert quadrant.outcomes_match is not outcomes


def test_robust_sigma() -> None:
    rng = np.random.default_rng(14)
    x = rng.normal(0, 2.0, 400)
    assert robust_sigma(x, 0.01) == pytest.approx(2.0, rel=0.1)
    spoiled = np.concatenate([x, [1e6, -1e6, 5e5]])
    assert robust_sigma(spoiled, 0.01) == pytest.approx(2.0, rel=0.1)
    assert robust_sigma([], 0.5) == 0.5
    assert robust_sigma([0.0] * 10, 0.05) == 0.05
    with pytest.raises(InvalidInput):
        robust_sigma([math.nan, 1.0], 0.01)
    with pytest.raises(InvalidInput):
        robust_sigma([1.0], 0.0)


def test_invalid_steps_raise() -> None:
    with pytest.raises(InvalidInput):
        cusum_step(CusumState(), math.inf, 1.0)
    with pytest.raises(InvalidInput):
        cusum_step(CusumState(), 0.0, 0.0)


def test_detector_latches_resets_and_round_trips() -> None:
    cfg = CusumConfig()
    detector = Detector(cfg=cfg)
    assert detector.sigma == cfg.prior_sigma
    detector = detector.feed([0.5] * 6)  # 50 % off with σ̂ = 10 %: diverges fast
    assert detector.diverged
    detector = detector.feed([0.0] * 3)
    assert detector.diverged  # latched until reset
    assert Detector.from_data(detector.to_data(), cfg) == detector
    fresh = detector.reset()
    assert not fresh.diverged
    assert fresh.history == ()
    assert detector.reset(keep_history=True).history == detector.history
    long = Detector(cfg=CusumConfig(window=16)).feed(np.linspace(0, 1, 40))
    assert len(long.history) == 16
    with pytest.raises(InvalidInput, match="detector"):
        Detector.from_data({"s_plus": 0.0})
