from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from koi.cli import main
from koi.planner import Planner
from koi.surrogate import RankCorrection
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Ladder,
    Observation,
    Rank,
    ServingTarget,
    to_json,
)
from tests.planner._world import World, chat_job, pools, unhurried_planner


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
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "jobs[0].model: required field missing" in err


def test_plan_keeps_a_bf16_only_job_on_bf16_and_says_why_int4_was_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The owner allows BF16 only, while the job still runs the INT4 ladder an earlier plan chose.
    job = attrs.evolve(chat_job(rate=2.0), precisions=["bf16"])
    env = next(p.environment for p in pools() if p.environment.gpu == "L40S")
    int4 = Ladder((Rank(Chain(job.model, env, Config(quant="int4")), 1),))
    snap = ClusterSnapshot(0.0, [job], pools(), [ActiveDeployment(job.id, int4)])
    path = tmp_path / "bf16.json"
    path.write_text(to_json(snap))
    assert main(["plan", str(path)]) == 0
    text = capsys.readouterr().out
    assert "chat: reconfigure" in text
    assert "precisions: bf16 (job policy: fp8, int4 ladders are infeasible, C2)" in text
    assert (
        "tp1 pp1 int4 batch256: C2: precision policy: ranks[0]: int4 is outside the accepted "
        "precisions (bf16) of job chat" in text
    )
    assert main(["plan", str(path), "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)["jobs"]
    assert out["precisions"] == ["bf16"]
    assert {r["chain"]["config"]["quant"] for r in out["ladder"]["ranks"]} == {"bf16"}
    assert out["rejected"][0]["why"].startswith("C2: precision policy")


def test_plan_names_the_jobs_at_risk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hopeless = attrs.evolve(
        chat_job("hopeless"), target=ServingTarget.online(p99_ttft_ms=1.0, p99_tpot_ms=60.0)
    )
    path = tmp_path / "snapshot.json"
    path.write_text(to_json(ClusterSnapshot(0.0, [chat_job(), hopeless], pools())))
    assert main(["plan", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["at_risk"] == ["hopeless"]
    job = next(j for j in out["jobs"] if j["job_id"] == "hopeless")
    assert job["at_risk"]["verdict"] == "hopeless"
    assert job["action"] == "place"  # served best effort
    assert main(["plan", str(path)]) == 0
    text = capsys.readouterr().out
    assert "at risk: hopeless" in text
    assert "AT RISK (hopeless): no ladder in this fleet meets its SLO" in text


def test_plan_says_what_the_planner_learned_of_the_chosen_chains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A world whose decode steps are 3x the prior's, served for a few ticks by a planner that
    # checkpoints: koi plan on that state reports the decode factor its prediction starts from.
    state = tmp_path / "state.json"
    world = World([chat_job()], pools(), truth=lambda _c: RankCorrection(decode_time=3.0))
    obs: list[Observation] = []
    with Planner(config=unhurried_planner().config, state_path=state) as planner:
        for _ in range(4):
            world.apply(planner.tick(world.snapshot(), obs).plan)
            obs = world.advance()
    path = tmp_path / "snapshot.json"
    path.write_text(to_json(world.snapshot()))
    assert main(["plan", str(path), "--state", str(state), "--json"]) == 0
    (job,) = json.loads(capsys.readouterr().out)["jobs"]
    assert job["corrections"], job
    for factors in job["corrections"]:
        assert factors["decode_time"] == pytest.approx(3.0, rel=0.1)
        assert factors["prefill_time"] == 1.0
    assert main(["plan", str(path), "--state", str(state)]) == 0
    assert "learned (rank 1, against the prior): decode_time ×" in capsys.readouterr().out
    # A planner that has seen nothing says nothing of it.
    assert main(["plan", str(path), "--json"]) == 0
    (fresh,) = json.loads(capsys.readouterr().out)["jobs"]
    assert all(f == 1.0 for rank in fresh["corrections"] for f in rank.values())
