"""Per-metric claims and held-out seed ranges of ``koi bench``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from koi.bench import (
    HELD_OUT_SEED_START,
    METRICS,
    RunTask,
    aggregate,
    claims,
    format_claims,
    run_bench,
    world_config,
)
from koi.cli import main
from koi.errors import InvalidInput
from koi.sim import SimConfig


def _rec(planner: str, seed: int, **metrics: float) -> dict[str, Any]:
    values = dict.fromkeys(METRICS, 0.5)
    values.update(metrics)
    return {"planner": planner, "seed": seed, "metrics": values, "wall_s": 1.0}


def _summary() -> dict[str, Any]:
    runs = [
        _rec("koi", 3, composite=70.0, goodput_tok_s=100.0, cost_per_slo_token_usd=1e-6),
        _rec("koi-frozen", 3, composite=72.0, goodput_tok_s=90.0, cost_per_slo_token_usd=2e-6),
        _rec("thompson", 3, composite=60.0, goodput_tok_s=120.0, cost_per_slo_token_usd=3e-6),
        _rec("rolling-milp", 3, composite=65.0, goodput_tok_s=80.0, cost_per_slo_token_usd=5e-7),
        _rec("milp-truth", 3, composite=90.0, goodput_tok_s=500.0, cost_per_slo_token_usd=1e-9),
    ]
    summary = aggregate(runs, ["koi", "koi-frozen", "thompson", "rolling-milp", "milp-truth"])
    summary["milp-truth"]["reference"] = True
    return summary


def test_each_metric_is_claimed_against_the_best_other_planner_on_it() -> None:
    rows = {c.metric: c for c in claims(_summary())}
    comp, good, cost = rows["composite"], rows["goodput_tok_s"], rows["cost_per_slo_token_usd"]
    # The best other planner differs per metric; the reference is never one of them.
    assert (comp.best_other, comp.best_baseline) == ("koi-frozen", "rolling-milp")
    assert comp.leads is False
    assert comp.difference(comp.best_other_value) == pytest.approx(-2.0)
    assert (good.best_other, good.leads) == ("thompson", False)
    assert good.difference(good.best_other_value) == pytest.approx(100 / 120 - 1)
    assert (cost.best_other, cost.leads) == ("rolling-milp", False)  # lower is better
    assert rows["ttft_attainment"].difference(0.4) == pytest.approx(10.0)  # points
    text = format_claims(list(rows.values()))
    assert "koi-frozen 72.0" in text
    assert "(trails)" in text
    assert "milp-truth" not in text
    assert format_claims(list(rows.values()), markdown=True).startswith("| metric | koi |")
    assert claims(_summary(), "nope") == []
    d = comp.to_dict()
    assert d["leads"] is False
    assert math.isclose(d["vs_best_baseline"], 5.0)


def test_bench_runs_the_seed_range_it_is_given() -> None:
    asked: list[tuple[str, int]] = []

    def worker(task: RunTask) -> dict[str, Any]:
        asked.append((task.planner, task.seed))
        return _rec(task.planner, task.seed, composite=float(task.seed))

    result = run_bench(
        "smoke", ["fcfs"], seeds=3, seed_start=HELD_OUT_SEED_START, jobs=1, worker=worker
    )
    assert sorted(asked) == [("fcfs", 3), ("fcfs", 4), ("fcfs", 5)]
    assert result.seeds == (3, 4, 5)
    assert result.summary["fcfs"]["composite"] == pytest.approx(4.0)
    with pytest.raises(InvalidInput, match="seed-start"):
        run_bench("smoke", ["fcfs"], seeds=1, seed_start=-1, worker=worker)


def test_cli_seed_start(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path)
    code = main(
        [
            "bench",
            "--scenario",
            "smoke",
            "--planners",
            "fcfs",
            "--seeds",
            "1",
            "--seed-start",
            "4",
            "--jobs",
            "1",
            "--no-plots",
            "--out",
            out,
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "from seed 4" in captured.err
    assert "seed=4" in captured.err


def test_bench_passes_the_worlds_sampling_to_every_run() -> None:
    asked: list[int | None] = []

    def worker(task: RunTask) -> dict[str, Any]:
        asked.append(task.replay_requests)
        return _rec(task.planner, task.seed)

    result = run_bench("smoke", ["fcfs", "edf"], seeds=2, jobs=1, worker=worker, replay_requests=40)
    assert asked == [40, 40, 40, 40]
    assert result.to_dict()["replay_requests"] == 40
    assert world_config(None) == SimConfig()
    assert world_config(40).sampling.max_requests_per_window == 40
    with pytest.raises(InvalidInput, match="replay-requests"):
        run_bench("smoke", ["fcfs"], seeds=1, worker=worker, replay_requests=0)


def test_a_world_replaying_every_request_is_a_different_world(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """smoke's chat job carries more than 40 requests a window: sampled at 40, replayed in full
    with ``all``; the command line names the world it ran on."""
    results = {}
    for replay in ("40", "all"):
        out = tmp_path / replay
        argv = ["bench", "--scenario", "smoke", "--planners", "fcfs", "--seeds", "1"]
        argv += ["--jobs", "1", "--no-plots", "--out", str(out), "--replay-requests", replay]
        assert main(argv) == 0
        results[replay] = json.loads((out / "results.json").read_text())
        assert results[replay]["command"].endswith(f"--replay-requests {replay}")
    sampled, full = (results[r]["planners"]["fcfs"] for r in ("40", "all"))
    assert sampled["ttft_attainment"] != full["ttft_attainment"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--scenario", "smoke", "--replay-requests", "0"])
    assert exc.value.code == 2
    assert "--replay-requests: expected a count >= 1 or 'all', got 0" in (capsys.readouterr().err)
