"""Rendered manifests against the real schemas: Kubernetes 1.30+ (strict) and LeaderWorkerSet v1."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from koi.catalog import load_catalog
from koi.errors import InvalidInput
from koi.integrations.engine import EngineSettings
from koi.integrations.kubernetes import (
    KubernetesSettings,
    NodeLabels,
    nodes_per_copy,
    render_job,
    render_rank,
)
from koi.types import Chain, Config, Ladder, Rank
from tests.integrations.kubernetes._schemas import VERSIONS, validate

CAT = load_catalog()


def env(cloud: str, instance: str, region: str, market: str = "on_demand"):  # type: ignore[no-untyped-def]
    return CAT.instance(cloud, instance).environment(region, market)


def _ranks() -> list[Rank]:
    l40s = env("aws", "g6e.12xlarge", "us-east-1")
    h100 = env("aws", "p5.48xlarge", "us-east-1")
    a100_spot = env("gcp", "a2-ultragpu-1g", "us-central1", "spot")
    onprem = env("onprem", "onprem-hgx-h100-8", "dc1", "reserved")
    return [
        Rank(Chain("Llama-3.1-8B", l40s, Config(tp=2, max_batch_size=128)), 3),
        Rank(Chain("Qwen3-8B", a100_spot, Config(engine="sglang", quant="fp8")), 2),
        Rank(Chain("Llama-3.1-70B", h100, Config(tp=8, max_batched_tokens=16384)), 1),
        Rank(Chain("Llama-3.1-405B", h100, Config(tp=8, pp=2, quant="fp8")), 2),
        Rank(Chain("Qwen3-235B-A22B", onprem, Config(engine="sglang", tp=8, pp=2)), 1),
    ]


def test_kubernetes_validate_covers_1_30_and_later() -> None:
    assert VERSIONS[0] == "1.30"
    assert len(VERSIONS) >= 2


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_manifest_passes_strict_validation(version: str) -> None:
    settings = KubernetesSettings(namespace="llm", labels={"team": "inference"})
    objs = render_job("chat", Ladder(tuple(_ranks())), settings)
    kinds = [o["kind"] for o in objs]
    assert kinds == ["Service", "Deployment", "Deployment", "Deployment"] + ["LeaderWorkerSet"] * 2
    for obj in objs:
        validate(obj, version, fast=True)
    if version in (VERSIONS[0], VERSIONS[-1]):  # and through kubernetes-validate's own entry point
        for obj in objs:
            validate(obj, version)


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Deployment":
        return list(obj["spec"]["template"]["spec"]["containers"])
    tpl = obj["spec"]["leaderWorkerTemplate"]
    return [
        *tpl["leaderTemplate"]["spec"]["containers"],
        *tpl["workerTemplate"]["spec"]["containers"],
    ]


def test_gpu_limits_are_quantity_strings_and_match_the_chain() -> None:
    for r in _ranks():
        obj = render_rank("chat", r, KubernetesSettings())
        per_pod = r.chain.gpus // nodes_per_copy(r.chain)
        for c in _containers(obj):
            assert c["resources"]["limits"] == {"nvidia.com/gpu": str(per_pod)}
            assert c["resources"]["requests"] == c["resources"]["limits"]


def test_engine_flags_carry_the_config() -> None:
    r = _ranks()[0]
    cmd = _containers(render_rank("chat", r, KubernetesSettings()))[0]["command"]
    text = " ".join(cmd)
    for flag in (
        "--tensor-parallel-size 2",
        "--pipeline-parallel-size 1",
        "--max-num-seqs 128",
        "--max-num-batched-tokens 8192",
        "--gpu-memory-utilization 0.9",
        "--served-model-name Llama-3.1-8B",
    ):
        assert flag in text
    assert "--quantization" not in text
    sgl = " ".join(_containers(render_rank("q", _ranks()[1], KubernetesSettings()))[0]["command"])
    assert "sglang.launch_server" in sgl
    assert "--quantization fp8" in sgl
    assert "--tp-size 1" in sgl


def test_a_multi_node_chain_is_a_leaderworkerset_group() -> None:
    r = _ranks()[3]
    obj = render_rank("big", r, KubernetesSettings())
    assert obj["spec"]["replicas"] == 2
    tpl = obj["spec"]["leaderWorkerTemplate"]
    assert tpl["size"] == 2
    assert tpl["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = tpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tpl["workerTemplate"]["spec"]["containers"][0]
    assert "readinessProbe" in leader
    assert "readinessProbe" not in worker
    assert "ray_cluster_size=$(LWS_GROUP_SIZE)" in leader["command"][-1]
    assert tpl["leaderTemplate"]["metadata"]["labels"]["koi.dev/role"] == "serve"
    assert tpl["workerTemplate"]["metadata"]["labels"]["koi.dev/role"] == "worker"
    sgl = render_rank("big", _ranks()[4], KubernetesSettings())
    cmd = sgl["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"]
    assert "--nnodes" in cmd
    assert "$(LWS_WORKER_INDEX)" in cmd


def test_placement_follows_the_configured_node_labels() -> None:
    r = _ranks()[1]
    pod = render_rank("q", r, KubernetesSettings())["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "a2-ultragpu-1g",
        "topology.kubernetes.io/region": "us-central1",
        "karpenter.sh/capacity-type": "spot",
    }
    labels = NodeLabels(
        region=None, market="cloud.google.com/gke-spot", market_values={"spot": "true"}
    )
    pod = render_rank("q", r, KubernetesSettings(node_labels=labels))["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "a2-ultragpu-1g",
        "cloud.google.com/gke-spot": "true",
    }


def test_the_service_selects_the_serving_pods_of_every_rank() -> None:
    objs = render_job("Chat Bot/EU", Ladder(tuple(_ranks()[:2])), KubernetesSettings())
    service = objs[0]
    assert service["metadata"]["name"].startswith("koi-chat-bot-eu-")
    for obj in objs[1:]:
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert all(labels[k] == v for k, v in service["spec"]["selector"].items())
        assert obj["metadata"]["annotations"]["koi.dev/job-id"] == "Chat Bot/EU"
    for version in VERSIONS[:1]:
        for obj in objs:
            validate(obj, version)


def test_strict_validation_bites() -> None:
    """The checks reject what a real server would: an unknown field, a wrong LWS enum."""
    import kubernetes_validate

    r = _ranks()[0]
    obj = render_rank("chat", r, KubernetesSettings())
    bad = copy.deepcopy(obj)
    bad["spec"]["template"]["spec"]["containers"][0]["gpus"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad, "1.30")
    lws = render_rank("big", _ranks()[3], KubernetesSettings())
    wrong = copy.deepcopy(lws)
    wrong["spec"]["startupPolicy"] = "WhenReady"
    with pytest.raises(jsonschema.ValidationError):
        validate(wrong, "1.30")
    deep = copy.deepcopy(lws)
    deep["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["cmd"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deep, "1.30")


def test_bad_chains_are_clear_errors() -> None:
    h100 = env("aws", "p5.48xlarge", "us-east-1")
    odd = Rank(Chain("Llama-3.1-405B", h100, Config(tp=3, pp=3)), 1)  # 9 GPUs on 8-GPU nodes
    with pytest.raises(InvalidInput, match="do not split evenly"):
        render_rank("x", odd, KubernetesSettings())
    with pytest.raises(InvalidInput, match="TensorRT-LLM serves fp8 only from a pre-quantized"):
        render_rank(
            "x",
            Rank(Chain("Llama-3.1-8B", h100, Config(engine="trtllm", quant="fp8")), 1),
            KubernetesSettings(),
        )
    wide = Rank(Chain("Llama-3.1-405B", h100, Config(engine="trtllm", tp=8, pp=2)), 1)
    with pytest.raises(InvalidInput, match="koi does not render multi-node TensorRT-LLM"):
        render_rank("x", wide, KubernetesSettings())
    int4 = Rank(Chain("Llama-3.1-8B", h100, Config(quant="int4")), 1)
    cmd = render_rank("x", int4, KubernetesSettings())["spec"]["template"]["spec"]["containers"][0]
    assert cmd["command"][-2:] == ["--quantization", "bitsandbytes"]
    eng = EngineSettings(checkpoints={"Llama-3.1-8B@int4": "hugging-quants/llama-8b-awq"})
    obj = render_rank(
        "x",
        Rank(Chain("Llama-3.1-8B", h100, Config(quant="int4")), 1),
        KubernetesSettings(engine=eng),
    )
    cmd = obj["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[2] == "hugging-quants/llama-8b-awq"
    assert "--quantization" not in cmd


@pytest.mark.parametrize("version", VERSIONS)
def test_a_trtllm_rank_is_a_deployment_running_trtllm_serve(version: str) -> None:
    h100 = env("aws", "p5.48xlarge", "us-east-1")
    eng = EngineSettings(checkpoints={"Llama-3.1-70B@fp8": "nvidia/Llama-3.1-70B-Instruct-FP8"})
    chain = Chain("Llama-3.1-70B", h100, Config(engine="trtllm", tp=4, quant="fp8"))
    objs = render_job("chat", Ladder((Rank(chain, 2),)), KubernetesSettings(engine=eng))
    assert [o["kind"] for o in objs] == ["Service", "Deployment"]
    for obj in objs:
        validate(obj, version, fast=True)
    if version in (VERSIONS[0], VERSIONS[-1]):
        for obj in objs:
            validate(obj, version)
    (container,) = _containers(objs[1])
    assert container["image"] == "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    shell, flag, script = container["command"]
    assert (shell, flag) == ("sh", "-c")
    assert "return_perf_metrics: true" in script
    assert "$(" not in script  # nothing for the kubelet to expand
    serve = script.splitlines()[-1]
    assert serve.startswith("exec trtllm-serve /tmp/koi-models/Llama-3.1-70B --backend pytorch")
    assert "nvidia/Llama-3.1-70B-Instruct-FP8 /tmp/koi-models/Llama-3.1-70B" in script
    for part in ("--tp_size 4", "--pp_size 1", "--max_batch_size 256", "--max_num_tokens 8192"):
        assert part in serve
