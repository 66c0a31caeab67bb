"""Measure the statistical figures of koi's evidence core; prints JSON."""

from __future__ import annotations

import json
import time

import numpy as np

from koi.beliefs import Verdict, invariance_test
from koi.cusum import CusumConfig, CusumState, Detector, cusum_step
from koi.risk import RiskConfig, band, calibrate_epsilon


def cusum_known(rng: np.random.Generator, shift: float, n: int, runs: int) -> float:
    if shift == 0.0:
        alarms = 0
        for _ in range(runs):
            s = CusumState()
            for r in rng.standard_normal(n):
                s = cusum_step(s, float(r), 1.0)
            alarms += s.alarms
        return runs * n / max(alarms, 1)
    delays = []
    for _ in range(runs):
        s = CusumState()
        for i, r in enumerate(rng.standard_normal(n) + shift, 1):
            s = cusum_step(s, float(r), 1.0)
            if s.alarm:
                delays.append(i)
                break
        else:
            delays.append(n + 1)
    return float(np.mean(delays))


def detector(rng: np.random.Generator, shift: float, runs: int) -> float:
    cfg = CusumConfig(prior_sigma=1.0)
    if shift == 0.0:
        alarms = 0
        for _ in range(runs):
            alarms += Detector(cfg=cfg).feed(rng.standard_normal(3000)).state.alarms
        return runs * 3000 / max(alarms, 1)
    delays = []
    for _ in range(runs):
        d = Detector(cfg=cfg).feed(rng.standard_normal(60))
        seen = d.state.alarms
        for i, r in enumerate(rng.standard_normal(100) + shift, 1):
            d = d.step(float(r))
            if d.state.alarms > seen:
                delays.append(i)
                break
        else:
            delays.append(101)
    return float(np.mean(delays))


def invariance(rng: np.random.Generator, n: int, shift: float, want: Verdict) -> float:
    hits = 0
    for _ in range(400):
        data = {e: list(rng.normal(shift if e == "b" else 0.0, 1.0, n)) for e in "abc"}
        hits += invariance_test(data) is want
    return hits / 400


def coverage(seed: int, eps0: float, *, calibrate: bool) -> float:
    rng = np.random.default_rng(seed)
    cfg = RiskConfig(eps0=eps0)
    eps = eps0
    hist: list[float] = []
    cov: list[float] = []
    for t in range(3000):
        r = (0.1 + 0.2 * t / 3000) * rng.standard_t(4)
        b = band(100.0, hist[-30:], eps, prior_uncertainty=0.2, cfg=cfg)
        hit = b.contains(100 * (1 + r))
        cov.append(hit)
        if calibrate:
            eps = calibrate_epsilon(eps, [hit], cfg)
        hist.append(r)
    return float(np.mean(cov[500:]))


t0 = time.perf_counter()
rng = np.random.default_rng(2026)
out = {
    "cusum_arl0_known_sigma": cusum_known(rng, 0.0, 5000, 60),
    "cusum_arl1_1sigma_known_sigma": cusum_known(rng, 1.0, 300, 1000),
    "detector_arl0_rolling_sigma": detector(rng, 0.0, 60),
    "detector_delay_1sigma": detector(rng, 1.0, 300),
    "invariance": {
        f"n={n}": {
            "accept_invariant": invariance(rng, n, 0.0, Verdict.ACCEPT),
            "reject_shift_1.5sd": invariance(rng, n, 1.5, Verdict.REJECT),
            "reject_shift_2sd": invariance(rng, n, 2.0, Verdict.REJECT),
        }
        for n in (10, 15, 20)
    },
    "coverage_calibrated": {str(e): coverage(1, e, calibrate=True) for e in (0.0, 0.3, 3.0)},
    "coverage_fixed_eps": {str(e): coverage(1, e, calibrate=False) for e in (0.0, 0.3, 1.5)},
}
out["seconds"] = round(time.perf_counter() - t0, 1)
print(json.dumps(out, indent=1))
