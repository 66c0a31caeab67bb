"""Launchers hold every rendered rank to its job's precision policy (``Job.precisions``).

The planners never propose a precision outside a job's set; the launchers are the last place a
plan written by hand, by an older koi or by another planner is stopped before it serves answers
the job's owner ruled out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from koi.catalog import load_catalog
from koi.cli import main
from koi.errors import InvalidInput
from koi.integrations.engine import EngineSettings, check_precision, engine_command
from koi.integrations.kubernetes import KubernetesLauncher, KubernetesSettings, render_rank
from koi.integrations.skypilot import SkyPilotSettings, render_service_config
from koi.types import (
    Chain,
    Config,
    Job,
    JobAction,
    Ladder,
    LengthDist,
    Plan,
    Quant,
    Rank,
    ServingTarget,
    WorkloadProfile,
    to_data,
)

yaml = pytest.importorskip("yaml", reason="rendering needs PyYAML: pip install 'koi[render]'")

CAT = load_catalog()
L40S = CAT.instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")
BF16_ONLY = {"chat": ("bf16",)}


def rank(**config: object) -> Rank:
    return Rank(Chain("Llama-3.1-8B", L40S, Config(**config)), 2)  # type: ignore[arg-type]


def chat_job(precisions: tuple[str, ...]) -> Job:
    workload = WorkloadProfile(LengthDist(500), LengthDist(100), rate_rps=1.0)
    target = ServingTarget.online(p99_ttft_ms=1000, p99_tpot_ms=60)
    return Job("chat", "Llama-3.1-8B", "online", workload, target, precisions=precisions)


def test_check_precision_refuses_weights_and_kv_cache_outside_the_set() -> None:
    policies = {"chat": (Quant.BF16,)}
    check_precision("chat", rank().chain, policies)  # BF16 weights, BF16 KV cache
    check_precision("other", rank(quant="int4").chain, policies)  # a job without a policy here
    with pytest.raises(InvalidInput, match=r"job 'chat': precision policy: int4 is outside"):
        check_precision("chat", rank(quant="int4").chain, policies)
    with pytest.raises(InvalidInput, match=r"precision policy: KV cache fp8 is outside"):
        check_precision("chat", rank(kv_cache_dtype="fp8").chain, policies)


def test_engine_settings_read_and_check_precision_lists() -> None:
    settings = EngineSettings(precisions={"chat": ["fp8", "bf16", "fp8"]})
    assert settings.precisions == {"chat": (Quant.BF16, Quant.FP8)}
    for bad in ({"chat": []}, {"chat": "bf16"}, {"chat": ["int8"]}, ["chat"]):
        with pytest.raises(InvalidInput, match="precisions"):
            EngineSettings(precisions=bad)  # type: ignore[arg-type]
    # The policy refuses to render; it never changes the flags of what it accepts.
    assert engine_command(rank(quant="fp8").chain, settings) == engine_command(
        rank(quant="fp8").chain, EngineSettings()
    )


def test_kubernetes_render_refuses_a_rank_the_job_does_not_accept() -> None:
    # From the snapshot's jobs (KubernetesSettings.jobs) ...
    k8s = KubernetesSettings(cloud="aws", jobs=(chat_job(("bf16",)),))
    assert render_rank("chat", rank(), k8s)["kind"] == "Deployment"
    with pytest.raises(InvalidInput, match="int4 is outside the accepted precisions"):
        render_rank("chat", rank(quant="int4"), k8s)
    # ... or from engine.precisions; a rank being scaled to zero is still retired.
    k8s = KubernetesSettings(cloud="aws", engine=EngineSettings(precisions=BF16_ONLY))
    with pytest.raises(InvalidInput, match="fp8 is outside the accepted precisions"):
        render_rank("chat", rank(quant="fp8"), k8s)
    assert render_rank("chat", rank(quant="fp8"), k8s, replicas=0)["spec"]["replicas"] == 0


def test_kubernetes_advisory_names_the_refused_rank_and_writes_the_rest(tmp_path: Path) -> None:
    settings = KubernetesSettings(
        cloud="aws", mode="advisory", out_dir=tmp_path, jobs=(chat_job(("bf16",)),)
    )
    ladder = Ladder((rank(tp=2), rank(quant="int4")))
    (result,) = KubernetesLauncher(None, settings).koi_launch(
        Plan(0.0, [JobAction("chat", "place", ladder)])
    )
    assert "not rendered: job 'chat': precision policy: int4 is outside" in result.message
    docs = list(yaml.safe_load_all((tmp_path / "koi-chat.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["Service", "Deployment"]
    assert "--quantization" not in docs[1]["spec"]["template"]["spec"]["containers"][0]["command"]


def test_skypilot_render_refuses_a_rank_the_job_does_not_accept() -> None:
    sky = SkyPilotSettings(engine=EngineSettings(precisions=BF16_ONLY))
    assert "fp8" not in render_service_config("chat", rank(), sky, CAT)["run"]
    with pytest.raises(InvalidInput, match="int4 is outside the accepted precisions"):
        render_service_config("chat", rank(quant="int4"), sky, CAT)
    # Another job's ranks are not this policy's business.
    assert render_service_config("label", rank(quant="int4"), sky, CAT)["name"]


def _plan_json(precisions: list[str] | None) -> dict[str, object]:
    ladder = to_data(Ladder((rank(quant="int4"),)))
    job: dict[str, object] = {"job_id": "chat", "action": "place", "ladder": ladder}
    if precisions is not None:
        job["precisions"] = precisions
    return {"time_s": 0.0, "jobs": [job]}


@pytest.mark.parametrize("target", ["k8s", "skypilot"])
def test_koi_render_holds_ranks_to_the_precisions_in_the_plan(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan_json(["bf16", "fp8"])))
    out = tmp_path / "refused"
    assert main(["render", str(plan), "--target", target, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "cannot render chat: aws/us-east-1/on_demand/g6e.12xlarge: job 'chat': " in err
    assert "precision policy: int4 is outside the accepted precisions (bf16, fp8)" in err
    assert list(out.iterdir()) == []
    # The same plan whose job accepts INT4 renders (and so does one that does not say).
    for precisions in (["bf16", "int4"], None):
        plan.write_text(json.dumps(_plan_json(precisions)))
        folder = tmp_path / f"ok-{precisions}"
        assert main(["render", str(plan), "--target", target, "--out", str(folder)]) == 0
        assert len(list(folder.iterdir())) == 1


def test_koi_render_names_a_bad_precision_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_plan_json(["int8"])))
    assert main(["render", str(plan), "--target", "k8s", "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err
    assert "plan.json: jobs: precisions['chat']: must be a non-empty list" in err
