"""Hand-made value fixtures shared by the dag tests (the catalog is built elsewhere)."""

from __future__ import annotations

from koi.testing.fakes import example_gpus, example_models
from koi.types import (
    Chain,
    Config,
    Environment,
    GpuSpec,
    Job,
    LengthDist,
    ModelSpec,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

H100 = example_gpus()["H100-SXM"]
L40S = GpuSpec(
    name="L40S",
    vendor="nvidia",
    memory_gib=48.0,
    hbm_tb_s=0.864,
    bf16_tflops=362.0,
    fp8_tflops=733.0,
    int4_tflops=None,
    link="pcie",
    link_gb_s=32.0,
    gpus_per_node=8,
    internode_gb_s=25.0,
)
LLAMA8B = example_models()["Llama-3.1-8B"]
MIXTRAL = ModelSpec(
    name="Mixtral-8x7B",
    params_b=46.7,
    active_params_b=12.9,
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    vocab=32000,
    max_context=32768,
    experts=8,
    experts_per_token=2,
    expert_intermediate=14336,
)
MODELS = {m.name: m for m in (LLAMA8B, MIXTRAL)}


def env(gpu: GpuSpec, market: str = "on_demand") -> Environment:
    return Environment(
        cloud="aws",
        region="us-east-1",
        market=market,
        instance_type=f"{gpu.name.lower()}-x8",
        gpu=gpu.name,
        gpus_per_instance=8,
        price_usd_per_h=8 * 2.5,
    )


def chain(
    gpu: GpuSpec = H100,
    model: ModelSpec = LLAMA8B,
    market: str = "on_demand",
    **config: object,
) -> Chain:
    return Chain(model=model.name, environment=env(gpu, market), config=Config(**config))  # type: ignore[arg-type]


def online_job(model: ModelSpec = LLAMA8B) -> Job:
    return Job(
        id="chat",
        model=model.name,
        job_class="online",
        workload=WorkloadProfile(
            input_len=LengthDist(mean=1000.0, cv=0.5, max=8000),
            output_len=LengthDist(mean=200.0, cv=0.5, max=2000),
            rate_rps=5.0,
        ),
        target=ServingTarget.online(p99_ttft_ms=800.0, p99_tpot_ms=60.0),
    )


def rank(replicas: int = 1, **kw: object) -> Rank:
    return Rank(chain(**kw), replicas)  # type: ignore[arg-type]
