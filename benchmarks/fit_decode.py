"""Fit the decode step's fixed terms on the fit split's single-sequence rows, printed as JSON.

    .venv/bin/python benchmarks/fit_decode.py

At concurrency 1 a closed loop decodes one sequence at a time, so the measured inter-token
latency is one decode step of one sequence at context ``ISL + OSL/2`` (on average): the cleanest
measurement of the step's terms that do not grow with the batch.  The fit-split rows at
concurrency 1 on NVIDIA GPUs (TensorRT-LLM: the DLI A100 rows, Llama-3-8B TP1/2 and -70B TP4/8
at ISL 200-7000; the DLI H100 rows, Llama-3-70B TP4/8 in FP16 and FP8; the NIM H100 row) pin
down, by grid search minimising the squared log error:

* per GPU generation (the A100 override; the Hopper override, H100-SXM and H200, fitted on the
  H100 rows) ``decode_attention_units``: (sequence, KV head) pairs decode attention needs to
  stream the KV cache at full efficiency; the rows' TPOT grows with the context ~3x faster than
  the KV bytes at HBM speed allow, by the same amount per layer per context token at 8, 4, 2
  and 1 KV heads per GPU;
* per generation ``allreduce_sync_us`` (a fixed cost per all-reduce that grows with the TP
  degree) and the HBM efficiency ``memory`` (weight streaming);
* TensorRT-LLM's fixed cost per iteration (``base_ms``, host-side: every GPU).

Block coordinate descent from the current constants: each GPU generation's three terms on its
own rows, then TensorRT-LLM's base cost on all rows, repeated until nothing moves.  Held-out
rows are never read.  The chosen point is then checked over the whole fit split with
``benchmarks/accuracy.py --split fit``.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from tests._support.accuracy import rows
from tests._support.specs import gpus, models

from koi.surrogate import OperatorModel, SurrogateConfig
from koi.types import Config

UNITS = [0.0, 8.0, 16.0, 24.0, 32.0, 40.0, 48.0, 56.0, 64.0, 80.0]
SYNC_US = [0.0, 4.0, 8.0, 12.0, 16.0, 24.0]
MEMORY = [0.55, 0.6, 0.65, 0.7, 0.75, 0.82, 0.9]
TRTLLM_BASE_MS = [0.6, 1.0, 1.5, 2.0, 2.5, 3.0]
# The GPU whose rows fit each override, and the overrides that share its terms.
GENERATIONS = {"A100-80GB": ("A100-80GB",), "H100-SXM": ("H100-SXM", "H200")}

Point = tuple[float, float, float]


def configured(base: SurrogateConfig, terms: dict[str, Point], trt_ms: float) -> SurrogateConfig:
    """``base`` with each generation's (units, sync, memory) and TensorRT-LLM's base cost."""
    gpu_eff = dict(base.gpu_efficiency)
    for gpu, (units, sync_us, memory) in terms.items():
        eff = attrs.evolve(
            base.efficiency_for(gpu, "nvidia"),
            decode_attention_units=units,
            allreduce_sync_us=sync_us,
            memory=memory,
        )
        for name in GENERATIONS[gpu]:
            gpu_eff[name] = eff
    eng = dict(base.engines)
    eng["trtllm"] = attrs.evolve(eng["trtllm"], base_ms=trt_ms)
    return attrs.evolve(base, gpu_efficiency=gpu_eff, engines=eng)


def decode_tpot_ms(row: dict[str, str], cfg: SurrogateConfig) -> float:
    config = Config(
        engine=row["engine"], tp=int(row["tp"]), pp=int(row["pp"] or 1), quant=row["quant"]
    )
    op = OperatorModel(gpus()[row["gpu"]], models()[row["model"]], config, cfg=cfg)
    ctx = int(row["isl"]) + int(row["osl"]) // 2
    step = op.step(prefill_tokens=0, prefill_pairs=0.0, decode_seqs=1, decode_context_tokens=ctx)
    return step.time_s * 1e3


def score(data: list[dict[str, str]], cfg: SurrogateConfig) -> tuple[float, float]:
    logs = [math.log(decode_tpot_ms(r, cfg) / float(r["tpot_ms"])) for r in data]
    return sum(x * x for x in logs), statistics.median(abs(math.exp(x) - 1.0) * 100.0 for x in logs)


def main() -> None:
    base = SurrogateConfig()
    data = [
        r
        for r in rows("fit")
        if r["concurrency"] == "1" and r["tpot_ms"] and gpus()[r["gpu"]].vendor.lower() == "nvidia"
    ]
    by_gpu = {g: [r for r in data if r["gpu"] == g] for g in GENERATIONS}
    eff = {g: base.efficiency_for(g, "nvidia") for g in GENERATIONS}
    terms: dict[str, Point] = {
        g: (eff[g].decode_attention_units, eff[g].allreduce_sync_us, eff[g].memory)
        for g in GENERATIONS
    }
    trt_ms = dict(base.engines)["trtllm"].base_ms
    for _ in range(5):
        before = (dict(terms), trt_ms)
        for gpu in GENERATIONS:
            grid = list(itertools.product(UNITS, SYNC_US, MEMORY))

            def gpu_error(p: Point, g: str = gpu, t: float = trt_ms) -> float:
                return score(by_gpu[g], configured(base, terms | {g: p}, t))[0]

            terms[gpu] = min(grid, key=gpu_error)
        trt_ms = min(TRTLLM_BASE_MS, key=lambda t: score(data, configured(base, terms, t))[0])
        if (terms, trt_ms) == before:
            break
    cfg = configured(base, terms, trt_ms)
    per_row = [
        {
            "gpu": r["gpu"],
            "model": r["model"],
            "tp": int(r["tp"]),
            "quant": r["quant"],
            "isl": int(r["isl"]),
            "osl": int(r["osl"]),
            "measured_ms": float(r["tpot_ms"]),
            "before_ms": round(decode_tpot_ms(r, base), 2),
            "after_ms": round(decode_tpot_ms(r, cfg), 2),
        }
        for r in data
    ]
    out = {
        "rows": {g: len(v) for g, v in by_gpu.items()} | {"all": len(data)},
        "decode_attention_units / allreduce_sync_us / memory": terms,
        "trtllm_base_ms": trt_ms,
        "sq_log_error": round(score(data, cfg)[0], 4),
        "median_ape": {g: round(score(v, cfg)[1], 1) for g, v in by_gpu.items()}
        | {"all": round(score(data, cfg)[1], 1)},
        "median_ape_at_current_constants": round(score(data, base)[1], 1),
        "per_row": per_row,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
