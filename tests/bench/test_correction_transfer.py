"""benchmarks/correction_transfer.py: how far a learned factor carries, on measurements."""

from __future__ import annotations

import math

import pytest
from tests._support.scripts import benchmark

TRANSFER = benchmark("correction_transfer")


def test_the_context_split_reproduces_the_factor_where_it_was_learned() -> None:
    split = TRANSFER.split_factor
    assert split(2.0, 0.2, 0.2) == pytest.approx(2.0)
    # Learned where the KV read is a fifth of the step: the excess sits in the other part,
    # so a step made mostly of the KV read is corrected far less.
    assert 1.0 < split(2.0, 0.2, 0.9) < 1.5
    assert split(2.0, 0.5, 0.9) == pytest.approx(2.0)  # an even split moves both parts alike


def _group(factors: dict[tuple[int, int], float]) -> dict[tuple[str, ...], list[object]]:
    """One deployment's points, keyed (concurrency, prompt length) -> implied factor."""
    pts = [TRANSFER.Point(f, 0.1, isl, conc) for (conc, isl), f in factors.items()]
    return {("src", "gpu", "model", "vllm", "1", "1", "bf16"): pts}


def test_bins_pairs_by_distance_and_fits_how_much_carries() -> None:
    # Near in batch the factor is the same; 16x apart in batch it is the prior's.
    points = {(c, isl): 2.0 for c in (1, 2) for isl in range(100, 2200, 100)}
    points |= {(32, isl): 1.0 for isl in range(100, 2200, 100)}
    bins = {
        (tuple(b["concurrency_dln"]), tuple(b["prompt_dln"])): b
        for b in TRANSFER.transfer(_group(points))
    }
    near = bins[((0.0, 1.0), (0.0, 1.0))]
    assert near["rho"] == pytest.approx(1.0)
    assert near["error_whole"] == 0.0
    assert near["error_prior"] == pytest.approx(round(math.log(2.0), 3))
    far = bins[((2.0, math.inf), (0.0, 1.0))]
    # Half the far pairs carry ln 2 to 0, half 0 to ln 2: the fit carries nothing.
    assert far["rho"] == 0.0
    assert far["error_whole"] == pytest.approx(round(math.log(2.0), 3))
    assert far["error_shrunk"] <= far["error_whole"]


def test_a_bin_with_too_few_pairs_is_left_out() -> None:
    assert TRANSFER.transfer(_group({(1, 100): 2.0, (4, 100): 1.5})) == []


def test_reach_scores_a_factor_that_fades_with_the_batch() -> None:
    # The prior's at small batches, twice it at large ones: fading a factor carried to a
    # smaller batch carries it better than whole; carried to a larger one it stays whole.
    assert TRANSFER.faded(2.0, 4.0, 1.0, 16.0, both=False) == 2.0
    down = TRANSFER.faded(2.0, 16.0, 1.0, 4.0, both=False)
    assert TRANSFER.faded(2.0, 4.0, 1.0, 16.0, both=True) == pytest.approx(down)
    assert 1.0 < down < 2.0
    points = {(1, 512): 1.0, (2, 512): 1.0, (32, 512): 2.0, (64, 512): 2.0}
    scores = {r["reach"]: r for r in TRANSFER.reach(_group(points))}
    assert set(scores) == {*(r for r in TRANSFER.REACHES if math.isfinite(r)), "whole"}
    whole, faded = scores["whole"], scores[1.0]
    assert whole["error_to_smaller"] == pytest.approx(round(math.log(2.0), 3))
    assert faded["error_to_smaller"] < 0.25 * whole["error_to_smaller"]
    assert faded["error_to_larger"] == whole["error_to_larger"]
    assert faded["error"] <= whole["error"] == whole["error_two_sided"]
