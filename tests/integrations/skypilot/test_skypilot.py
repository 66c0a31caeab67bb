"""SkyServe rendering and the SkyPilot launcher against a stubbed ``sky`` client."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import yaml

from koi.catalog import load_catalog
from koi.errors import InvalidInput
from koi.integrations.skypilot import (
    SkyPilotLauncher,
    SkyPilotSettings,
    render_service_config,
    serve_name,
)
from koi.testing.contracts import LauncherContract
from koi.types import ActionKind, Chain, Config, JobAction, Ladder, LaunchResult, Plan, Rank
from tests.integrations.skypilot._stub_sky import StubSky, UpdateMode

CAT = load_catalog()
L40S = CAT.instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")
L4_SPOT = CAT.instance("aws", "g6.xlarge").environment("us-east-1", "spot")
A100_SPOT = CAT.instance("gcp", "a2-ultragpu-1g").environment("us-central1", "spot")


def rank(env=L40S, replicas: int = 2, **config: object) -> Rank:  # type: ignore[no-untyped-def]
    return Rank(Chain("Llama-3.1-8B", env, Config(**config)), replicas)  # type: ignore[arg-type]


def plan(*ranks: Rank, job: str = "chat", kind: str = "place") -> Plan:
    return Plan(0.0, [JobAction(job, kind, Ladder(ranks))])


def settings(**kw: object) -> SkyPilotSettings:
    return SkyPilotSettings(**{"ready_timeout_s": 0.3, "poll_interval_s": 0.02, **kw})  # type: ignore[arg-type]


def launch(launcher: SkyPilotLauncher, p: Plan) -> LaunchResult:
    (result,) = launcher.koi_launch(p)
    return result


# -- rendering ------------------------------------------------------------------------------------


def test_service_yaml_carries_resources_probe_replicas_and_command() -> None:
    r = rank(L4_SPOT, replicas=3, max_batch_size=64)
    cfg = render_service_config("chat", r, SkyPilotSettings(), CAT)
    assert cfg["name"] == serve_name("chat", r.chain)
    assert cfg["resources"] == {
        "accelerators": "L4:1",
        "use_spot": True,
        "ports": 8000,
        "image_id": "docker:vllm/vllm-openai:v0.11.0",
        "infra": "aws/us-east-1",
    }
    assert cfg["service"] == {
        "readiness_probe": {"path": "/health", "initial_delay_seconds": 1800},
        "replica_policy": {"min_replicas": 3, "max_replicas": 3},
    }
    assert cfg["run"].startswith("vllm serve meta-llama/Llama-3.1-8B ")
    assert "--max-num-seqs 64" in cfg["run"]
    h100 = CAT.instance("aws", "p5.48xlarge").environment("us-east-1", "on_demand")
    big = render_service_config("big", rank(h100, 1, tp=8), SkyPilotSettings(), CAT)
    assert big["resources"]["accelerators"] == "H100:8"
    assert big["resources"]["use_spot"] is False


def test_fallbacks_list_equivalent_regions_within_the_price_tolerance() -> None:
    cfg = render_service_config(
        "chat", rank(L40S), SkyPilotSettings(fallback_price_tolerance=0.0), CAT
    )
    assert "infra" not in cfg["resources"]
    infra = [x["infra"] for x in cfg["resources"]["any_of"]]
    assert infra[0] == "aws/us-east-1"
    same = [
        e
        for e in CAT.environments(gpus=["L40S"], markets=["on_demand"])
        if e.gpus_per_instance == 4
        and e.price_usd_per_h <= L40S.price_usd_per_h
        and e.id != L40S.id
    ]
    assert sorted(infra[1:]) == sorted(f"{e.cloud}/{e.region}" for e in same)
    assert same
    narrow = SkyPilotSettings(fallback_price_tolerance=0.0, clouds=("gcp",))
    assert "any_of" not in render_service_config("chat", rank(L40S), narrow, CAT)["resources"]


def test_what_skyserve_cannot_run_is_a_clear_error() -> None:
    h100 = CAT.instance("aws", "p5.48xlarge").environment("us-east-1", "on_demand")
    with pytest.raises(InvalidInput, match="spans 2 instances"):
        render_service_config("x", rank(h100, 1, tp=8, pp=2), SkyPilotSettings(), CAT)
    onprem = CAT.instance("onprem", "onprem-l40s-4").environment("dc1", "reserved")
    with pytest.raises(InvalidInput, match="cloud 'onprem' has no SkyPilot name"):
        render_service_config("x", rank(onprem, 1), SkyPilotSettings(), CAT)


def test_names_are_short_stable_and_per_pool() -> None:
    a, b = rank(L40S, tp=1), rank(L40S, tp=4)
    assert serve_name("chat", a.chain) == serve_name("chat", b.chain)  # same pool: an update
    assert serve_name("chat", a.chain) != serve_name("chat", rank(L4_SPOT).chain)
    assert len(serve_name("a-very-long-job-name-for-a-service", a.chain)) <= 31


# -- the launcher ---------------------------------------------------------------------------------


def test_advisory_writes_one_yaml_per_rank(tmp_path: Path) -> None:
    launcher = SkyPilotLauncher(settings(mode="advisory", out_dir=tmp_path))
    result = launch(launcher, plan(rank(L40S), rank(L4_SPOT, 1)))
    assert result.materialized == Ladder()
    files = sorted(tmp_path.glob("*.yaml"))
    assert len(files) == 2
    docs = [yaml.safe_load(f.read_text()) for f in files]
    assert {d["resources"]["accelerators"] for d in docs} == {"L40S:1", "L4:1"}


def test_dry_run_only_validates() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(mode="dry_run"), sky=sky)
    result = launch(launcher, plan(rank()))
    assert [op for op, _ in sky.calls] == ["task"]
    assert result.materialized == Ladder()
    assert "dry-run: SkyPilot accepted 1 of 1" in result.message


def test_apply_brings_services_up_and_reports_ready_replicas() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    p = plan(rank(L40S, 2), rank(A100_SPOT, 1))
    result = launch(launcher, p)
    assert result.complete, result.message
    assert sorted(sky.services) == sorted(
        serve_name("chat", r.chain) for r in p.ladders["chat"].ranks
    )
    assert [op for op, _ in sky.calls].count("up") == 2


def test_a_config_change_on_the_same_pool_is_a_blue_green_update() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    launch(launcher, plan(rank(L40S, 2, tp=1)))
    new = rank(L40S, 1, tp=4)
    result = launch(launcher, plan(new, kind="reconfigure"))
    assert result.complete, result.message
    name = serve_name("chat", new.chain)
    assert sky.services[name]["version"] == 2
    assert sky.update_modes == [UpdateMode.BLUE_GREEN]
    assert "--tensor-parallel-size 4" in sky.services[name]["config"]["run"]


def test_an_unchanged_service_is_not_updated_again() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    r = rank(L40S, 2)
    launch(launcher, plan(r))
    assert launch(launcher, plan(r)).complete  # placed again, same config: nothing to roll
    assert launch(launcher, plan(r, kind="keep")).complete
    restarted = SkyPilotLauncher(settings(), sky=sky)  # forgot what it sent; a keep is trusted
    assert launch(restarted, plan(r, kind="keep")).complete
    assert [op for op, _ in sky.calls if op in ("up", "update")] == ["up"]
    assert sky.services[serve_name("chat", r.chain)]["version"] == 1


def test_a_move_to_another_pool_retires_the_old_service_once_the_new_one_is_ready() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    old = rank(L40S, 2)
    launch(launcher, plan(old))
    new = rank(A100_SPOT, 1)
    sky.ready_cap[serve_name("chat", new.chain)] = 0
    result = launch(launcher, plan(new, kind="reconfigure"))
    assert "kept 1 replaced service(s) up" in result.message
    assert serve_name("chat", old.chain) in sky.services
    sky.ready_cap.clear()
    result = launch(launcher, plan(new, kind="reconfigure"))
    assert result.complete
    assert f"retired {serve_name('chat', old.chain)}" in result.message
    assert list(sky.services) == [serve_name("chat", new.chain)]


def test_a_partial_launch_is_reported_per_rank() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    r = rank(L40S, 3)
    sky.ready_cap[serve_name("chat", r.chain)] = 1
    result = launch(launcher, plan(r))
    assert result.materialized == Ladder((attrs.evolve(r, replicas=1),))
    assert "1 of 3 replicas ready after 0.3 s" in result.message


def test_skypilot_errors_are_reported_not_raised() -> None:
    sky = StubSky()
    sky.fail["up"] = RuntimeError("no capacity in us-east-1 for L40S:1")
    result = launch(SkyPilotLauncher(settings(), sky=sky), plan(rank()))
    assert result.materialized == Ladder()
    assert "serve up" in result.message
    assert "no capacity" in result.message
    sky = StubSky()
    sky.fail["status"] = ConnectionError("API server unreachable")
    result = launch(SkyPilotLauncher(settings(), sky=sky), plan(rank()))
    assert result.materialized == Ladder()
    assert "nothing applied: status" in result.message
    sky = StubSky()
    sky.fail["task"] = ValueError("Invalid task YAML")
    result = launch(SkyPilotLauncher(settings(), sky=sky), plan(rank()))
    assert "validate" in result.message
    assert "Invalid task YAML" in result.message
    assert not any(op == "up" for op, _ in sky.calls)


def test_a_stopped_job_is_taken_down_and_other_clouds_are_left_alone() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    launch(launcher, plan(rank()))
    assert launcher.koi_launch(Plan(0.0, [JobAction("chat", ActionKind.STOP)])) == []
    assert sky.services == {}
    onprem = CAT.instance("onprem", "onprem-l40s-4").environment("dc1", "reserved")
    assert launcher.koi_launch(plan(rank(onprem, 1))) == []


def test_another_jobs_services_are_not_touched() -> None:
    sky = StubSky()
    launcher = SkyPilotLauncher(settings(), sky=sky)
    launch(launcher, plan(rank(), job="chat-abcdef"))
    launch(launcher, plan(rank(A100_SPOT, 1), job="chat"))
    launch(launcher, plan(rank(L4_SPOT, 1), job="chat", kind="reconfigure"))
    assert any(n.startswith("koi-chat-abcdef-") for n in sky.services)


def test_missing_skypilot_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "sky", None)
    launcher = SkyPilotLauncher(settings())
    with pytest.raises(InvalidInput, match=r"pip install 'koi\[skypilot\]'"):
        launcher.koi_launch(plan(rank()))


class TestSkyPilotLauncherContract(LauncherContract):
    @pytest.fixture
    def sky(self) -> StubSky:
        return StubSky()

    @pytest.fixture
    def launcher(self, sky: StubSky) -> SkyPilotLauncher:
        return SkyPilotLauncher(settings(), sky=sky)

    @pytest.fixture
    def launch_plan(self) -> Plan:
        return Plan(
            0.0,
            [
                JobAction("chat", "place", Ladder((rank(L40S, 2), rank(A100_SPOT, 1)))),
                JobAction("batch", "place", Ladder((rank(L4_SPOT, 1),))),
                JobAction("idle", "defer"),
            ],
        )

    @pytest.fixture
    def partial_launch_plan(self, sky: StubSky) -> Plan:
        r = rank(L40S, 3)
        sky.ready_cap[serve_name("chat", r.chain)] = 1
        return plan(r)
