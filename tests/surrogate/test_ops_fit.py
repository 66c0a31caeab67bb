"""The L40S / L4 efficiencies against the measured L40S kernel tables (benchmarks/fit_ops.py)."""

from __future__ import annotations

import statistics

import attrs
from tests._support.ops import op_rows, predicted_ms
from tests._support.specs import gpus, models

from koi.surrogate import OperatorModel, SurrogateConfig
from koi.types import Config


def _median_ape_and_bias(kind: str, dtype: str, eff_gpu: str) -> tuple[float, float]:
    gpu = gpus()["L40S"]
    eff = SurrogateConfig().efficiency_for(eff_gpu, "nvidia")
    rows = [
        r
        for r in op_rows()
        if r["op"] == kind
        and r["dtype"] == dtype
        and (kind != "context_attention" or int(r["tokens"]) >= 4096)
    ]
    ratios = [predicted_ms(r, gpu, eff) / float(r["latency_ms"]) for r in rows]
    return (
        statistics.median(abs(x - 1.0) * 100.0 for x in ratios),
        statistics.median(ratios),
    )


def test_l40s_efficiencies_reproduce_its_measured_kernels() -> None:
    for kind, dtype, limit in (
        ("gemm", "bfloat16", 12.0),
        ("gemm", "fp8", 16.0),
        ("context_attention", "bfloat16", 10.0),
        ("generation_attention", "bfloat16", 25.0),
    ):
        ape, bias = _median_ape_and_bias(kind, dtype, "L40S")
        assert ape <= limit, (kind, dtype, ape)
        assert 0.9 <= bias <= 1.1, (kind, dtype, bias)
    # The NVIDIA prior the L40S had before does not: its FP8 GEMMs run ~20 % too fast.
    ape, bias = _median_ape_and_bias("gemm", "fp8", "no-override")
    assert ape > 16.0
    assert bias < 0.85


def test_fp8_gemms_use_their_own_efficiency_on_ada() -> None:
    model = models()["Llama-3.1-8B"]
    cfg = SurrogateConfig()
    eff = cfg.efficiency_for("L4", "nvidia")
    assert eff == cfg.efficiency_for("L40S", "nvidia")
    assert 0 < eff.fp8_gemm < eff.gemm

    def prefill_s(c: SurrogateConfig, quant: str) -> float:
        m = OperatorModel(gpus()["L40S"], model, Config(quant=quant), cfg=c)
        return m.breakdown(
            prefill_tokens=8192, prefill_pairs=0.0, decode_seqs=0, decode_context_tokens=0
        )["gemm"].compute_s

    # Large prefill GEMMs: FP8 saves only 733·0.46 / (362·0.7) ≈ 1.33x over BF16 on an L40S.
    ratio = prefill_s(cfg, "bf16") / prefill_s(cfg, "fp8")
    assert 1.25 < ratio < 1.4
    # fp8_gemm = 0 falls back to the BF16 efficiency: the full 2x of the FP8 peak.
    same = attrs.evolve(
        cfg, gpu_efficiency={**dict(cfg.gpu_efficiency), "L40S": attrs.evolve(eff, fp8_gemm=0.0)}
    )
    assert prefill_s(same, "bf16") / prefill_s(same, "fp8") > 1.9
