"""`koi bench` end to end on `smoke`: every planner runs, plans are valid, metrics in range."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from koi.baselines import PLANNERS
from koi.bench import METRICS, aggregate, format_table
from koi.cli import main


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    out = tmp_path_factory.mktemp("bench")
    capsys_out = out / "stdout.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(
            [
                "bench",
                "--scenario",
                "smoke",
                "--seeds",
                "1",
                "--jobs",
                "1",
                "--json",
                "--out",
                str(out),
            ]
        )
    assert code == 0
    capsys_out.write_text(buf.getvalue())
    return json.loads(buf.getvalue()), out, buf.getvalue()


def test_every_planner_runs_on_smoke_with_no_rejected_action(
    bench: tuple[dict[str, Any], Path, str],
) -> None:
    data, out, _ = bench
    assert list(data["planners"]) == list(PLANNERS)
    for name, entry in data["planners"].items():
        assert entry["rejected_actions"] == 0, name
        assert (out / "traces" / f"{name}-seed0.json").exists()
    assert (
        json.loads((out / "results.json").read_text())["planners"].keys() == data["planners"].keys()
    )


def test_results_carry_every_metric_in_range(bench: tuple[dict[str, Any], Path, str]) -> None:
    data, _, _ = bench
    for name, entry in data["planners"].items():
        for m in METRICS:
            assert m in entry, (name, m)
            assert m in entry["per_seed"][0], (name, m)
        for m in (
            "quality",
            "coverage",
            "efficiency",
            "online_admission",
            "batch_admission",
            "batch_progress",
            "ttft_attainment",
            "tpot_attainment",
            "deadline_attainment",
        ):
            assert 0.0 <= entry[m] <= 1.0, (name, m)
        assert 0.0 <= entry["composite"] <= 100.0
        q, c, e = entry["quality"], entry["coverage"], entry["efficiency"]
        assert entry["composite"] == pytest.approx(100 * (q * c * e) ** (1 / 3))
        assert entry["goodput_tok_s"] > 0
        assert entry["cost_per_slo_token_usd"] > 0
        assert entry["spread"]["composite"] == 0.0  # one seed


def test_report_and_calibration_trace(bench: tuple[dict[str, Any], Path, str]) -> None:
    _, out, _ = bench
    report = (out / "report.md").read_text()
    assert "| koi |" in report
    assert "milp-truth*" in report
    assert "koi-truth*" in report
    assert "## koi per metric" in report
    koi = json.loads((out / "traces" / "koi-seed0.json").read_text())
    cal = koi["calibration"]
    assert len(cal) == len(koi["trace"]["ticks"])
    assert all("epsilon" in c for c in cal)
    base = json.loads((out / "traces" / "fcfs-seed0.json").read_text())
    assert base["calibration"] is None


def test_deferring_everything_scores_zero() -> None:
    from koi.sim import DeferAll, run

    m = run("smoke", DeferAll(), seed=0).metrics
    assert m.composite == 0.0
    assert m.goodput_tok_s == 0.0
    assert m.online_admission == m.batch_admission == m.batch_progress == 0.0
    assert m.ttft_attainment == m.tpot_attainment == 0.0
    assert m.cost_usd == 0.0
    assert math.isinf(m.cost_per_slo_token_usd)


def test_aggregate_mean_spread_and_table() -> None:
    def rec(planner: str, seed: int, composite: float, cost: float) -> dict[str, Any]:
        metrics = dict.fromkeys(METRICS, 0.5)
        metrics.update(composite=composite, cost_per_slo_token_usd=cost)
        return {"planner": planner, "seed": seed, "metrics": metrics, "wall_s": 1.0}

    runs = [rec("koi", 0, 60.0, 1e-6), rec("koi", 1, 64.0, 3e-6), rec("fcfs", 0, 50.0, math.inf)]
    summary = aggregate(runs, ["koi", "fcfs"])
    assert summary["koi"]["composite"] == pytest.approx(62.0)
    assert summary["koi"]["spread"]["composite"] == pytest.approx(math.sqrt(8.0))
    assert summary["fcfs"]["cost_per_slo_token_usd"] is None
    text = format_table(summary)
    assert "62.0 ± 2.8" in text
    assert "n/a" in text
    md = format_table(summary, markdown=True)
    assert md.splitlines()[0].startswith("| Planner |")


def test_bad_planner_and_scenario_fail_cleanly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # One line on stderr naming what is wrong, and nothing written: the bench's banner and
    # its output directory come only after its inputs are checked.
    out = tmp_path / "out"
    assert main(["bench", "--scenario", "smoke", "--planners", "nope", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown planner" in err
    assert len(err.splitlines()) == 1
    assert main(["bench", "--scenario", "no-such", "--planners", "fcfs", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no-such" in err
    assert len(err.splitlines()) == 1
    assert main(["bench", "--scenario", "smoke", "--jobs", "0", "--out", str(out)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert main(["bench", "--scenario", "smoke", "--seeds", str(10**11), "--out", str(out)]) == 2
    assert "seeds: must be in [1, 10000]" in capsys.readouterr().err
    # An empty list is not "every planner", and a planner twice is not two planners.
    for planners, what in (
        (",", "no planner given"),
        ("", "no planner given"),
        ("fcfs,fcfs", "twice"),
    ):
        assert (
            main(["bench", "--scenario", "smoke", "--planners", planners, "--out", str(out)]) == 2
        )
        err = capsys.readouterr().err
        assert what in err
        assert len(err.splitlines()) == 1
    assert not out.exists()
