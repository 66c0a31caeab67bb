"""`koi sweep`: the grid, the knobs reaching koi's planner, JSON lines and tables, bad files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import koi.baselines
from koi.bench import EVERY_REQUEST, RunTask, parse_sweep, run_one, run_sweep
from koi.cli import main
from koi.config import KoiConfig
from koi.errors import InvalidInput
from koi.sim import DeferAll

TINY = Path(__file__).with_name("tiny.toml").as_posix()

GRID = f"""
[sweep]
scenarios = ["{TINY}"]
planners = ["koi", "fcfs"]
seeds = 2

[knobs]
"planner.tau" = [0.2, 0.3]
planner.search_rounds = [1, 2]
"""


WALL_CLOCK_KNOB = """
[sweep]
scenarios = ["smoke"]
planners = ["koi"]
[knobs]
selector.time_limit_s = 1.0
"""


def test_the_grid_crosses_knob_settings_with_koi_planners_only() -> None:
    sweep = parse_sweep(GRID)
    assert sweep.seeds == (0, 1)
    assert sweep.knobs == (("planner.tau", (0.2, 0.3)), ("planner.search_rounds", (1, 2)))
    cells = sweep.cells()
    koi_cells = [c for c in cells if c[1] == "koi"]
    assert len(koi_cells) == 4 * 2
    assert {c[3] for c in koi_cells} == {
        (("planner.tau", t), ("planner.search_rounds", r)) for t in (0.2, 0.3) for r in (1, 2)
    }
    assert [c for c in cells if c[1] == "fcfs"] == [(TINY, "fcfs", s, ()) for s in (0, 1)]


def test_the_worlds_sampling_reaches_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int | None] = []

    def worker(task: RunTask) -> dict[str, Any]:
        seen.append(task.replay_requests)
        return run_one(TINY, "fcfs", task.seed) | {"planner": task.planner}

    for value, expected in (("40", 40), ('"all"', EVERY_REQUEST), (None, None)):
        text = "[sweep]\nscenarios = ['" + TINY + "']\nplanners = ['fcfs']\n"
        if value is not None:
            text += f"replay_requests = {value}\n"
        sweep = parse_sweep(text)
        assert sweep.replay_requests == expected
        seen.clear()
        run_sweep(sweep, jobs=1, worker=worker)
        assert seen == [expected]
    # The setting changes what the world measures (a sample of 2 requests per window).
    few = run_sweep(parse_sweep(GRID.replace("seeds = 2", "seeds = 1\nreplay_requests = 2")))
    full = run_sweep(parse_sweep(GRID.replace("seeds = 2", "seeds = 1")))
    assert [r["metrics"] for r in few.runs if r["planner"] == "fcfs"] != [
        r["metrics"] for r in full.runs if r["planner"] == "fcfs"
    ]


def test_knobs_reach_koi_planners_config_and_runs_come_back_in_grid_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[tuple[str, KoiConfig | None]] = []

    def make_policy(name: str, *, config: KoiConfig | None = None, **_: Any) -> DeferAll:
        built.append((name, config))
        return DeferAll()

    monkeypatch.setattr(koi.baselines, "make_policy", make_policy)
    result = run_sweep(parse_sweep(GRID), jobs=1)
    configs = {
        (cfg.planner.tau, cfg.planner.search_rounds) for name, cfg in built if cfg is not None
    }
    assert configs == {(0.2, 1), (0.2, 2), (0.3, 1), (0.3, 2)}
    assert [cfg for name, cfg in built if name == "fcfs"] == [None, None]
    labels = [(r["label"], r["seed"]) for r in result.runs]
    first = "koi planner.tau=0.2 planner.search_rounds=1"
    assert labels[:2] == [(first, 0), (first, 1)]
    assert labels[-2:] == [("fcfs", 0), ("fcfs", 1)]
    table = result.summaries["tiny"]
    assert list(table)[-1] == "fcfs"
    assert len(table) == 5
    assert table["fcfs"]["seeds"] == [0, 1]


def test_sweep_command_writes_json_lines_and_a_table_per_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'[sweep]\nscenarios = ["{TINY}"]\nplanners = ["fcfs", "thompson"]\nseeds = [0, 1]\n'
    )
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--jobs", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "== tiny" in text
    assert "thompson†" in text
    lines = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert sorted((x["planner"], x["seed"]) for x in lines) == [
        ("fcfs", 0),
        ("fcfs", 1),
        ("thompson", 0),
        ("thompson", 1),
    ]
    one = next(x for x in lines if x["planner"] == "fcfs" and x["seed"] == 1)
    alone = run_one(TINY, "fcfs", 1)["metrics"]
    same = [m for m in one["metrics"] if not m.startswith("plan_time")]
    assert {m: one["metrics"][m] for m in same} == {m: alone[m] for m in same}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenarios"]["tiny"]["thompson"]["stochastic"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sweep]\nplanners = ['fcfs']\n", "sweep.scenarios: expected a non-empty list"),
        ("[sweep]\nscenarios = ['smoke']\nplanners = ['nope']\n", "unknown planner 'nope'"),
        ("[sweep]\nscenarios = ['smoke']\nplanners = ['fcfs']\nseeds = 0\n", "sweep.seeds"),
        (
            "[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\nseeds = [1, 1]\n",
            "repeats a seed",
        ),
        ("[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\njobs = 2\n", "unknown key"),
        ("[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\n[knob]\n", "unknown table"),
        (
            "[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\n[knobs]\nplanner.tau = [2.0]\n",
            "knob 'planner.tau': tau: must be in",
        ),
        (
            "[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\n[knobs]\nplanner.nope = 1\n",
            "has no field 'nope'",
        ),
        ("[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\n[knobs]\nx = []\n", "empty list"),
        ("[sweep\n", "not valid TOML"),
        (
            "[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\nreplay_requests = 0\n",
            "sweep.replay_requests: expected a count >= 1 or 'all'",
        ),
        (
            "[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\nreplay_requests = 'some'\n",
            "sweep.replay_requests",
        ),
        (
            WALL_CLOCK_KNOB.replace("selector.time_limit_s", "'planner.tau'")
            + "planner.tau = [0.3]\n",
            "knobs.planner.tau: given twice",
        ),
        (
            "[sweep]\nscenarios = ['smoke']\nplanners = ['koi']\nseeds = 10000000000000000\n",
            r"sweep.seeds: must be in \[1, 10000\]",
        ),
        (WALL_CLOCK_KNOB, "without wall-clock limits"),
        (WALL_CLOCK_KNOB.replace("selector.time_limit_s", "planner.tick_deadline_s"), "wall-clock"),
    ],
)
def test_bad_sweeps_fail_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_sweep(text, source="s.toml")


def test_sweep_command_reports_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", str(tmp_path / "missing.toml"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("koi: error: sweep: no file")
    assert len(err.splitlines()) == 1
    # A scenario that does not load, or no workers: one line, and no banner nor runs.jsonl.
    out = tmp_path / "out"
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep]\nscenarios = ['no-such']\nplanners = ['fcfs']\n")
    assert main(["sweep", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no built-in scenario or file 'no-such'" in err
    assert len(err.splitlines()) == 1
    good = tmp_path / "good.toml"
    good.write_text("[sweep]\nscenarios = ['smoke']\nplanners = ['fcfs']\n")
    assert main(["sweep", str(good), "--jobs", "0", "--out", str(out)]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert not out.exists()
