"""benchmarks/job_candidates.py: one job's candidates, tick by tick, over a stretch of a run."""

from __future__ import annotations

import json

import pytest
from tests._support.scripts import benchmark

JOB_CANDIDATES = benchmark("job_candidates")


def test_prints_the_stretch_asked_for_with_the_chosen_candidate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # agent-30b arrives at minute 10 of smoke: nothing to say before, candidates from then on.
    argv = ["--scenario", "smoke", "--job", "agent-30b", "--from", "5", "--to", "15", "--json"]
    assert JOB_CANDIDATES.main(argv) == 0
    ticks = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["minute"] for t in ticks] == [5.0, 10.0, 15.0]
    assert ticks[0]["candidates"] == []  # not arrived yet
    for t in ticks[1:]:
        rows = t["candidates"]
        assert sum(r["chosen"] for r in rows) == 1
        assert [r["value"] for r in rows if not r["rejected"]] == sorted(
            (r["value"] for r in rows if not r["rejected"]), reverse=True
        )
    assert {"defer", "place"} <= {r["kind"] for r in ticks[1]["candidates"]}  # pending
    # Each candidate names its ranks: a deferral none, a placement one per rank.
    for r in ticks[1]["candidates"]:
        assert (r["kind"] == "defer") == (r["ladder"] == [])
        for rank in r["ladder"]:
            assert "×" in rank
            assert " tp" in rank
            assert " @" in rank


def test_an_unknown_job_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert JOB_CANDIDATES.main(["--scenario", "smoke", "--job", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no job 'nope'" in err


def test_a_knob_without_a_value_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        JOB_CANDIDATES.main(["--scenario", "smoke", "--job", "chat-8b", "--knob", "planner.tau"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err == "--knob 'planner.tau': expected PATH=VALUE\n"
