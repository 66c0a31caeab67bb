"""Constraint C2: memory and topology feasibility."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.specs import gpus, models

from koi.errors import InvalidInput
from koi.surrogate import EngineProfile, SurrogateConfig, feasibility
from koi.types import Config, Environment


def _env(gpu: str, n: int, *, multi_node: bool = False) -> Environment:
    return Environment(
        cloud="aws",
        region="us-east-1",
        market="on_demand",
        instance_type=f"x{n}",
        gpu=gpu,
        gpus_per_instance=n,
        price_usd_per_h=10.0,
        multi_node=multi_node,
    )


def test_70b_bf16_is_infeasible_on_one_48gb_gpu_with_a_reason() -> None:
    f = feasibility(gpus()["L40S"], models()["Llama-3.1-70B"], Config())
    assert not f.ok
    assert f.reason.startswith("weights 131 GiB > 1 × ")
    assert "usable" in f.reason
    assert f.kv_capacity_tokens == 0


def test_70b_fits_on_four_h100_with_kv_capacity() -> None:
    f = feasibility(
        gpus()["H100-SXM"], models()["Llama-3.1-70B"], Config(tp=4), _env("H100-SXM", 8)
    )
    assert f.ok, f.reason
    assert f.kv_capacity_tokens > 100_000
    assert 0 < f.max_seqs <= 256


def test_quantization_shrinks_weights_and_grows_kv() -> None:
    g, m = gpus()["H100-SXM"], models()["Llama-3.1-70B"]
    bf = feasibility(g, m, Config(tp=4))
    f8 = feasibility(g, m, Config(tp=4, quant="fp8"))
    i4 = feasibility(g, m, Config(tp=4, quant="int4"))
    assert bf.weights_gib > f8.weights_gib > i4.weights_gib
    assert bf.kv_capacity_tokens < f8.kv_capacity_tokens < i4.kv_capacity_tokens


def test_topology_rules() -> None:
    g, m = gpus()["H100-SXM"], models()["Llama-3.1-8B"]
    assert "does not divide" in feasibility(g, m, Config(tp=3)).reason
    assert "layers" in feasibility(g, m, Config(pp=64)).reason
    # 2 GPUs on 8-GPU instances: divides, fine.
    assert feasibility(g, m, Config(tp=2), _env("H100-SXM", 8)).ok
    # 16 GPUs on 8-GPU instances need a multi-node pool.
    big = models()["Llama-3.1-405B"]
    r = feasibility(g, big, Config(tp=8, pp=2), _env("H100-SXM", 8)).reason
    assert "multi-node" in r
    assert feasibility(
        g, big, Config(tp=8, pp=2, quant="fp8"), _env("H100-SXM", 8, multi_node=True)
    ).ok
    # 4 GPUs cannot pack onto 6-GPU instances.
    assert "neither divide" in feasibility(g, m, Config(tp=4), _env("H100-SXM", 6)).reason
    assert "is not" in feasibility(g, m, Config(), _env("L4", 1)).reason


def test_an_engine_runs_only_on_the_gpu_vendors_it_has_builds_for() -> None:
    m = models()["Llama-3.1-70B"]
    amd, nvidia = gpus()["MI300X"], gpus()["H100-SXM"]
    assert amd.vendor == "amd"
    trt = Config(tp=4, engine="trtllm")
    f = feasibility(amd, m, trt, _env("MI300X", 8))
    assert not f.ok
    assert f.reason == "trtllm runs on nvidia GPUs, not on MI300X (amd)"
    assert feasibility(nvidia, m, trt, _env("H100-SXM", 8)).ok
    for engine in ("vllm", "sglang"):  # both ship ROCm builds
        assert feasibility(amd, m, Config(tp=4, engine=engine), _env("MI300X", 8)).ok
    # The list is the profile's: an operator's own build of TensorRT-LLM for AMD is taken.
    cfg = SurrogateConfig()
    anywhere = attrs.evolve(cfg.engine_profile("trtllm"), vendors=())
    cfg = attrs.evolve(cfg, engines={**dict(cfg.engines), "trtllm": anywhere})
    assert feasibility(amd, m, trt, _env("MI300X", 8), cfg=cfg).ok


@pytest.mark.parametrize("bad", ["nvidia", ("NVIDIA",), ("nvidia", "nvidia"), ("",), (1,)])
def test_engine_vendors_are_a_list_of_distinct_lower_case_names(bad: object) -> None:
    with pytest.raises(InvalidInput, match=r"^vendors: must be a list of distinct lower-case"):
        EngineProfile(vendors=bad)  # type: ignore[arg-type]


@given(
    gpu=st.sampled_from(sorted(gpus())),
    model=st.sampled_from(sorted(models())),
    tp=st.sampled_from([1, 2, 4, 8]),
    quant=st.sampled_from(["bf16", "fp8", "int4"]),
)
def test_feasibility_never_raises_and_is_consistent(
    gpu: str, model: str, tp: int, quant: str
) -> None:
    f = feasibility(gpus()[gpu], models()[model], Config(tp=tp, quant=quant))
    assert f.ok == (f.reason == "")
    if f.ok:
        assert f.kv_capacity_tokens >= 4096
        assert f.max_seqs >= 1
        assert f.weights_gib < f.usable_gib
