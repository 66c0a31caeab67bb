"""The invariance test decides with 10–20 residuals per environment."""

from __future__ import annotations

import math

import numpy as np
import pytest

from koi.beliefs import (
    InvarianceConfig,
    Verdict,
    invariance_report,
    invariance_test,
    invariance_verdicts,
)
from koi.errors import InvalidInput

ENVS = ("H100-SXM|dense-s|vllm", "L40S|dense-s|vllm", "A100-80GB|dense-s|vllm")


def _rates(n: int, shift: float, runs: int = 200) -> dict[Verdict, float]:
    rng = np.random.default_rng(1000 + n)
    counts = dict.fromkeys(Verdict, 0)
    for _ in range(runs):
        data = {e: rng.normal(shift if i == 1 else 0.0, 1.0, n) for i, e in enumerate(ENVS)}
        counts[invariance_test(data)] += 1
    return {v: c / runs for v, c in counts.items()}


@pytest.mark.parametrize("n", [10, 15, 20])
def test_invariant_residuals_are_accepted(n: int) -> None:
    assert _rates(n, shift=0.0)[Verdict.ACCEPT] >= 0.9


@pytest.mark.parametrize("n", [10, 15, 20])
def test_environment_dependent_residuals_are_rejected(n: int) -> None:
    assert _rates(n, shift=2.0)[Verdict.REJECT] >= 0.9


def test_a_spread_that_depends_on_the_environment_is_rejected() -> None:
    rng = np.random.default_rng(7)
    hits = sum(
        invariance_test({"a": rng.normal(0, 1, 20), "b": rng.normal(0, 4, 20)}) is Verdict.REJECT
        for _ in range(100)
    )
    assert hits >= 90


def test_too_little_data_is_undecided() -> None:
    rng = np.random.default_rng(3)
    assert invariance_test({"a": rng.normal(0, 1, 20)}) is Verdict.UNDECIDED
    assert invariance_test({"a": rng.normal(0, 1, 4), "b": rng.normal(0, 1, 4)}) is (
        Verdict.UNDECIDED
    )
    # Enough to run the tests but too little to have seen a shift that matters.
    small = {"a": rng.normal(0, 1, 6), "b": rng.normal(0, 1, 6)}
    report = invariance_report(small)
    assert report.verdict in (Verdict.UNDECIDED, Verdict.REJECT)
    assert report.detectable_shift > InvarianceConfig().margin


def test_decides_from_nine_samples_with_defaults() -> None:
    rng = np.random.default_rng(4)
    report = invariance_report({"a": rng.normal(0, 1, 9), "b": rng.normal(0, 1, 9)})
    assert report.detectable_shift <= 1.5
    report = invariance_report({"a": rng.normal(0, 1, 8), "b": rng.normal(0, 1, 8)})
    assert report.detectable_shift > 1.5


def test_noise_free_residuals() -> None:
    assert invariance_test({"a": [0.1] * 10, "b": [0.1] * 10}) is Verdict.ACCEPT
    assert invariance_test({"a": [0.1] * 10, "b": [0.3] * 10}) is Verdict.REJECT
    report = invariance_report({"a": [0.0] * 9 + [1.0], "b": [0.0] * 10})
    assert math.isfinite(report.p_location)


def test_alpha_changes_the_decision() -> None:
    rng = np.random.default_rng(5)
    data = {"a": rng.normal(0, 1, 15), "b": rng.normal(1.1, 1, 15)}
    strict = invariance_report(data, cfg=InvarianceConfig(alpha=0.001))
    loose = invariance_test(data, alpha=0.2)
    assert loose is Verdict.REJECT
    assert strict.verdict is not Verdict.REJECT


def test_verdicts_per_edge_and_bad_input() -> None:
    rng = np.random.default_rng(6)
    out = invariance_verdicts(
        {
            ("x:tp", "v:comm_share"): {"a": rng.normal(0, 1, 15), "b": rng.normal(0, 1, 15)},
            ("v:comm_share", "y:p99_tpot_ms"): {"a": rng.normal(0, 1, 15), "b": [9.0] * 15},
        }
    )
    assert out[("v:comm_share", "y:p99_tpot_ms")] is Verdict.REJECT
    with pytest.raises(InvalidInput, match="finite"):
        invariance_test({"a": [math.nan] * 10, "b": [0.0] * 10})
