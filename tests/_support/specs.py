"""GPU and model specs for the surrogate tests, read from the catalog's data files.

Read directly (not through ``koi.catalog``) so these tests do not depend on the catalog code.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import koi
from koi.types import (
    Environment,
    GpuSpec,
    Job,
    LengthDist,
    ModelSpec,
    ServingTarget,
    WorkloadProfile,
    from_data,
)

#: One on-demand 8×H100-SXM node, for tests that need an environment and not a fleet.
H100_NODE = Environment(
    cloud="aws",
    region="us-east-1",
    market="on_demand",
    instance_type="H100-SXM-x8",
    gpu="H100-SXM",
    gpus_per_instance=8,
    price_usd_per_h=40.0,
)

#: One on-demand 4×L40S instance (PCIe, no NVLink), beside it.
L40S_NODE = Environment(
    cloud="aws",
    region="us-east-1",
    market="on_demand",
    instance_type="g6e.12xlarge",
    gpu="L40S",
    gpus_per_instance=4,
    price_usd_per_h=10.0,
)


def _load(name: str, key: str) -> list[dict[str, Any]]:
    text = (Path(koi.__file__).parent / "catalog" / "data" / name).read_text(encoding="utf-8")
    rows: list[dict[str, Any]] = tomllib.loads(text)[key]
    return [{k: v for k, v in row.items() if k != "source"} for row in rows]


@cache
def gpus() -> dict[str, GpuSpec]:
    rows = _load("gpus.toml", "gpus")
    return {
        r["name"]: from_data({"fp8_tflops": None, "int4_tflops": None} | r, GpuSpec) for r in rows
    }


@cache
def models() -> dict[str, ModelSpec]:
    return {r["name"]: from_data(r, ModelSpec) for r in _load("models.toml", "models")}


@cache
def measured_models() -> dict[str, ModelSpec]:
    """The catalog's models and the accuracy fixture's extra ones (models it measures that the
    catalog does not ship: tests/surrogate/data/extra_models.toml)."""
    path = Path(__file__).resolve().parent.parent / "surrogate" / "data" / "extra_models.toml"
    rows: list[dict[str, Any]] = tomllib.loads(path.read_text(encoding="utf-8"))["models"]
    extra = {
        r["name"]: from_data({k: v for k, v in r.items() if k != "source"}, ModelSpec) for r in rows
    }
    return models() | extra


def chat_job(rate: float, prompt: float = 1000) -> Job:
    """An online Llama-3.1-8B chat job (2 s / 80 ms p99 bounds) at ``rate`` requests/s."""
    w = WorkloadProfile(LengthDist(prompt, 0.5, 8000), LengthDist(200, 0.5, 2000), rate_rps=rate)
    target = ServingTarget.online(p99_ttft_ms=2000, p99_tpot_ms=80)
    return Job(id="chat", model="Llama-3.1-8B", job_class="online", workload=w, target=target)


def summary_job(rate: float) -> Job:
    """An online Qwen3-32B job of 20K-token summaries (10 s / 100 ms p99 bounds) at ``rate``
    requests/s: prompts of several prefill slices, a few of which fill an H100's KV cache."""
    w = WorkloadProfile(LengthDist(20_000, 0.3, 32_000), LengthDist(500, 0.4, 2_048), rate_rps=rate)
    target = ServingTarget.online(p99_ttft_ms=10_000, p99_tpot_ms=100)
    return Job(id="summ", model="Qwen3-32B", job_class="online", workload=w, target=target)
