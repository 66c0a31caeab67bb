from __future__ import annotations

import json
from pathlib import Path

import pytest

from koi.cli import main
from koi.types import ClusterSnapshot, to_json
from tests.planner._world import chat_job, pools


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    snap = ClusterSnapshot(0.0, [chat_job(), chat_job("small", rate=1.0)], pools())
    path = tmp_path / "snapshot.json"
    path.write_text(to_json(snap))
    return path


def test_plan_explains_every_job(snapshot_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(snapshot_file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {j["job_id"] for j in out["jobs"]} == {"chat", "small"}
    for job in out["jobs"]:
        assert job["action"] == "place"
        assert job["predicted"]["p99_ttft_ms"] > 0
        assert job["reason"]


def test_plan_text_and_state(
    snapshot_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    assert main(["plan", str(snapshot_file), "--state", str(state)]) == 0
    text = capsys.readouterr().out
    assert "chat: place" in text
    assert "predicted: TTFT p99" in text
    assert state.exists()


def test_plan_names_the_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"time_s": 0, "jobs": [{"id": "x"}], "pools": []}')
    assert main(["plan", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "jobs[0].model: required field missing" in err
