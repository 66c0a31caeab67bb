"""benchmarks/paired_runs.py: paired per-seed differences between two revisions' bench runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests._support.scripts import benchmark

PAIRED_RUNS = benchmark("paired_runs")


def _write(d: Path, seed: int, composite: float, planner: str = "koi") -> None:
    metrics = dict.fromkeys(PAIRED_RUNS.METRICS, 1.0)
    metrics["composite"] = composite
    record = {"scenario": "s", "policy": planner, "seed": str(seed), "metrics": metrics}
    (d / "traces").mkdir(parents=True, exist_ok=True)
    (d / "traces" / f"{planner}-seed{seed}.json").write_text(json.dumps(record))


def test_pairs_by_seed_and_bounds_the_mean_difference(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for seed, (a, b) in enumerate([(50.0, 52.0), (60.0, 61.0), (55.0, 58.0), (40.0, 39.0)]):
        _write(old, seed, a)
        _write(new, seed, b)
    _write(old, 9, 10.0)  # on one side only: not paired
    _write(new, 0, 99.0, planner="fcfs")  # another planner: not read
    out = PAIRED_RUNS.paired(
        PAIRED_RUNS.load([old], "koi"), PAIRED_RUNS.load([new], "koi"), resamples=2000
    )
    assert out["runs"] == ["s:0", "s:1", "s:2", "s:3"]
    c = out["metrics"]["composite"]
    assert c["difference"] == pytest.approx(1.25)
    assert c["per_seed"] == [2.0, 1.0, 3.0, -1.0]
    assert (c["seeds_up"], c["seeds_down"]) == (3, 1)
    lo, hi = c["interval_95"]
    assert -1.0 <= lo < 1.25 < hi <= 3.0
    assert out["metrics"]["swaps"]["difference"] == 0.0


def test_no_common_seed_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "old", 0, 1.0)
    _write(tmp_path / "new", 1, 1.0)
    with pytest.raises(SystemExit, match=r"no \(scenario, seed\) run"):
        PAIRED_RUNS.paired(
            PAIRED_RUNS.load([tmp_path / "old"], "koi"),
            PAIRED_RUNS.load([tmp_path / "new"], "koi"),
            10,
        )
