"""Single-kernel latencies the operator model implies, against measured kernel tables.

tests/surrogate/data/l40s_ops.csv holds measured latencies of single kernels on an L40S
(aiconfigurator-core 0.12.0's vLLM 0.24.0 tables, docs/surrogate.md §7 "PCIe GPUs"): GEMMs by
(m, n, k) in BF16 and FP8, FlashAttention-2 prefill by (batch, prompt length, heads) and decode
attention by (batch, context, KV heads), head dimension 128.  ``predicted_ms`` is what the
operator model's terms (docs/surrogate.md §1) give for one such kernel with the efficiencies
``eff``: a GEMM is ``max(2mnk / (Π·η_g(m)), n·k·b / (B·η_m))``, prefill attention
``4·H·d·pairs / (Π_bf16·η_a)`` over the causal pairs, decode attention the KV read
``b·s·2·h_kv·d·2 / (B·η_m)`` (slowed by the small-batch fill factor when
``decode_attention_units`` is set).  Used by benchmarks/fit_ops.py and its test.
"""

from __future__ import annotations

import csv
from pathlib import Path

from koi.surrogate import Efficiency
from koi.types import GpuSpec

DATA = Path(__file__).resolve().parent.parent / "surrogate" / "data" / "l40s_ops.csv"


def op_rows() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def predicted_ms(row: dict[str, str], gpu: GpuSpec, eff: Efficiency) -> float:
    """The operator model's latency of the row's kernel on ``gpu`` with efficiencies ``eff``."""
    bf16 = gpu.bf16_tflops * 1e12
    hbm = gpu.hbm_tb_s * 1e12 * eff.memory
    op = row["op"]
    if op == "gemm":
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        fp8 = row["dtype"] == "fp8"
        peak = (gpu.fp8_tflops or gpu.bf16_tflops) * 1e12 if fp8 else bf16
        eta = eff.fp8_gemm if fp8 and eff.fp8_gemm > 0 else eff.gemm
        compute = 2.0 * m * n * k / (peak * eta * m / (m + eff.gemm_half_tokens))
        memory = n * k * (1 if fp8 else 2) / hbm
        return max(compute, memory) * 1e3
    batch, tokens = int(row["m"]), int(row["tokens"])
    heads, kv_heads, dim = int(row["heads"]), int(row["kv_heads"]), int(row["head_dim"])
    if op == "context_attention":
        pairs = batch * tokens * (tokens + 1) / 2.0
        return 4.0 * heads * dim * pairs / (bf16 * eff.attention) * 1e3
    if op == "generation_attention":
        fill = eff.decode_attention_units / kv_heads
        slow = fill / batch if 0 < batch < fill else 1.0
        return batch * tokens * 2.0 * kv_heads * dim * 2.0 / hbm * slow * 1e3
    raise ValueError(f"unknown op {op!r}")
