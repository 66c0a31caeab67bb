"""Fit vLLM's per-sequence iteration cost on the fit split's vLLM rows, printed as JSON.

    .venv/bin/python benchmarks/fit_vllm.py

A decode step grows with the batch beyond the GPU's GEMM and attention work by a cost per
running sequence.  Two forms are fitted, each alone, by grid search minimising the squared log
error of the predicted TPOT:

* ``EngineProfile.sampling_bytes_per_logit``: each sampled token's logits over the vocabulary
  pass through HBM (logits, temperature and penalties, softmax, top-k/top-p), so the cost per
  sequence is ``vocab x bytes / (HBM bandwidth x efficiency)``: large on a slow-memory GPU and a
  large vocabulary, small on an H100;
* ``EngineProfile.per_seq_ms``: a host cost per sequence, the same on every GPU.

Rows: the fit split's vLLM rows on NVIDIA GPUs, i.e. the L4 rows (vLLM 0.23 V1, Qwen2.5-0.5B,
vocabulary 151,936, concurrency 1-32, p50 inter-token latency: a small model on a 300 GB/s GPU,
so the per-sequence share of a step is large), each replayed under its source's protocol with
the per-request floor at 0 (it does not enter a decode step).  The MI300X rows (vLLM V0 of 2024,
Llama-3.1-405B FP8 TP 8, batch 1-256) are reported, not fitted: their TPOT residual is confounded
with the AMD efficiencies fitted on them.  ``base_ms`` stays: the L4 rows' single-sequence step
cannot separate it from the L4's HBM efficiency (docs/surrogate.md §7 "PCIe GPUs").  The floor is
then fitted by ``benchmarks/fit_floor.py``.  Held-out rows are never read.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from tests._support.accuracy import predict_row, rows

from koi.surrogate import SurrogateConfig

SAMPLING_BYTES = [0.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 80.0, 96.0, 128.0, 160.0]
PER_SEQ_MS = [0.0, 0.006, 0.012, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.12, 0.15]


def configured(base: SurrogateConfig, sampling: float, per_seq: float) -> SurrogateConfig:
    eng = dict(base.engines)
    eng["vllm"] = attrs.evolve(
        eng["vllm"], request_floor_ms=0.0, sampling_bytes_per_logit=sampling, per_seq_ms=per_seq
    )
    return attrs.evolve(base, engines=eng)


def main() -> None:
    base = SurrogateConfig()
    now = dict(base.engines)["vllm"]
    data = [r for r in rows("fit") if r["engine"] == "vllm" and r["tpot_ms"]]

    def logs(cfg: SurrogateConfig) -> list[float]:
        out = []
        for r in data:
            pred = predict_row(r, cfg)
            out.append(math.log(pred["tpot_ms"] / float(r["tpot_ms"])) if pred else float("nan"))
        return out

    def fit_error(x: list[float]) -> float:
        return sum(v * v for v, r in zip(x, data, strict=True) if r["gpu"] != "MI300X")

    def stats(x: list[float]) -> dict[str, dict[str, float]]:
        out = {}
        for gpu in ("all", *sorted({r["gpu"] for r in data})):
            sel = [v for v, r in zip(x, data, strict=True) if gpu in ("all", r["gpu"])]
            out[gpu] = {
                "rows": len(sel),
                "median_ape": round(statistics.median(abs(math.exp(v) - 1) * 100 for v in sel), 1),
                "bias": round(statistics.median(math.exp(v) for v in sel), 3),
            }
        return out

    result: dict[str, object] = {
        "in_effect": {
            "sampling_bytes_per_logit": now.sampling_bytes_per_logit,
            "per_seq_ms": now.per_seq_ms,
        }
        | stats(logs(configured(base, now.sampling_bytes_per_logit, now.per_seq_ms))),
    }
    prior_seq = 0.012  # the engineering estimate vLLM had before any fit
    for name, grid, fixed in (
        ("sampling_bytes_per_logit", SAMPLING_BYTES, {"per_seq_ms": prior_seq}),
        ("per_seq_ms", PER_SEQ_MS, {"sampling_bytes_per_logit": 0.0}),
    ):
        if name == "per_seq_ms":
            table = {v: logs(configured(base, 0.0, v)) for v in grid}
        else:
            table = {v: logs(configured(base, v, prior_seq)) for v in grid}
        best = min(grid, key=lambda v: fit_error(table[v]))
        result[name] = {
            "fitted": best,
            "with": fixed,
            "interior": min(grid) < best < max(grid),
            "sq_log_error_fitted_rows": {str(v): round(fit_error(table[v]), 4) for v in grid},
            "at_fit": stats(table[best]),
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
