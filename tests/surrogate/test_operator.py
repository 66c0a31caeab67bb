"""Trends of the operator-level step-time model (issue 4, "Must show")."""

from __future__ import annotations

import attrs
import pytest
from tests._support.specs import gpus, models

from koi.surrogate import OperatorModel, SurrogateConfig
from koi.types import Config, GpuSpec


def _decode(m: OperatorModel, seqs: int, ctx: int) -> float:
    return m.step(
        prefill_tokens=0, prefill_pairs=0.0, decode_seqs=seqs, decode_context_tokens=seqs * ctx
    ).time_s


def test_decode_step_grows_with_batch_and_context() -> None:
    m = OperatorModel(gpus()["H100-SXM"], models()["Llama-3.1-8B"], Config())
    assert _decode(m, 1, 1000) < _decode(m, 32, 1000) < _decode(m, 256, 1000)
    assert _decode(m, 32, 500) < _decode(m, 32, 4000) < _decode(m, 32, 16000)


def test_prefill_attention_is_quadratic() -> None:
    m = OperatorModel(gpus()["H100-SXM"], models()["Llama-3.1-8B"], Config())

    def attn(n: int) -> float:
        return m.breakdown(
            prefill_tokens=n, prefill_pairs=n * n / 2, decode_seqs=0, decode_context_tokens=0
        )["attention"].compute_s

    assert attn(8000) / attn(4000) > 3.9


def test_tp_helps_more_on_nvlink_than_on_pcie_without_p2p() -> None:
    model = models()["Llama-3.1-8B"]

    def speedup(spec: GpuSpec) -> float:
        one = _decode(OperatorModel(spec, model, Config(tp=1, quant="fp8")), 64, 1000)
        four = _decode(OperatorModel(spec, model, Config(tp=4, quant="fp8")), 64, 1000)
        return one / four

    l40s = gpus()["L40S"]
    assert l40s.link == "pcie_no_p2p"
    assert speedup(gpus()["H100-SXM"]) > 1.3
    # The same L40S GPUs (same efficiencies) with an NVLink-class link: only the link differs.
    nvlinked = attrs.evolve(l40s, link="nvlink", link_gb_s=450.0)
    assert speedup(nvlinked) > speedup(l40s) * 1.2
    pcie = OperatorModel(gpus()["L40S"], model, Config(tp=4)).breakdown(
        prefill_tokens=0, prefill_pairs=0, decode_seqs=64, decode_context_tokens=64000
    )
    nvl = OperatorModel(gpus()["H100-SXM"], model, Config(tp=4)).breakdown(
        prefill_tokens=0, prefill_pairs=0, decode_seqs=64, decode_context_tokens=64000
    )
    assert pcie["tp_allreduce"].comm_s > 2.5 * nvl["tp_allreduce"].comm_s


def test_fp8_raises_prefill_throughput_only_where_the_gpu_has_fp8() -> None:
    model = models()["Llama-3.1-8B"]

    def prefill(gpu: str, quant: str) -> float:
        m = OperatorModel(gpus()[gpu], model, Config(quant=quant))
        return m.step(
            prefill_tokens=8192, prefill_pairs=8192 * 1024, decode_seqs=0, decode_context_tokens=0
        ).time_s

    assert prefill("H100-SXM", "fp8") < 0.7 * prefill("H100-SXM", "bf16")
    # A100 has no FP8 tensor cores: FP8 weights only save bytes, not math.
    assert prefill("A100-80GB", "fp8") > 0.9 * prefill("A100-80GB", "bf16")
    # Decode is memory bound: halving weight bytes helps everywhere.
    for g in ("H100-SXM", "A100-80GB"):
        bf = _decode(OperatorModel(gpus()[g], model, Config()), 8, 1000)
        f8 = _decode(OperatorModel(gpus()[g], model, Config(quant="fp8")), 8, 1000)
        assert f8 < 0.75 * bf


def test_moe_decode_scales_with_active_not_total_parameters() -> None:
    moe = OperatorModel(gpus()["H200"], models()["Qwen3-30B-A3B"], Config())
    dense = OperatorModel(gpus()["H200"], models()["Qwen3-32B"], Config())
    # Same total size (~30B): the MoE decodes a single sequence far faster.
    assert _decode(moe, 1, 1000) < 0.4 * _decode(dense, 1, 1000)
    # Its expert bytes grow with the distinct experts the batch touches.
    small = moe.breakdown(
        prefill_tokens=0, prefill_pairs=0, decode_seqs=1, decode_context_tokens=1000
    )
    big = moe.breakdown(
        prefill_tokens=0, prefill_pairs=0, decode_seqs=64, decode_context_tokens=64000
    )
    assert big["moe_experts"].memory_s > 5 * small["moe_experts"].memory_s


def test_pipeline_adds_bubbles_and_sendrecv() -> None:
    m = OperatorModel(gpus()["H100-SXM"], models()["Llama-3.1-70B"], Config(tp=4, pp=2))
    parts = m.breakdown(
        prefill_tokens=512, prefill_pairs=512 * 256, decode_seqs=16, decode_context_tokens=16000
    )
    assert parts["pp_bubble"].bubble_s > 0
    assert parts["pp_sendrecv"].comm_s > 0
    flat = OperatorModel(gpus()["H100-SXM"], models()["Llama-3.1-70B"], Config(tp=4)).breakdown(
        prefill_tokens=512, prefill_pairs=512 * 256, decode_seqs=16, decode_context_tokens=16000
    )
    assert flat["pp_bubble"].bubble_s == 0


def test_engine_overhead_is_part_of_every_step() -> None:
    base = SurrogateConfig()
    # Without vLLM's sampling traffic (tested below), so that only the iteration costs differ.
    engines = dict(base.engines)
    engines["vllm"] = attrs.evolve(engines["vllm"], sampling_bytes_per_logit=0.0)
    cfg = attrs.evolve(base, engines=engines)
    gpu, model = gpus()["H100-SXM"], models()["Llama-3.2-1B"]
    m = OperatorModel(gpu, model, Config(engine="vllm"), cfg=cfg)
    t = OperatorModel(gpu, model, Config(engine="trtllm"), cfg=cfg)
    v, r = cfg.engine_profile("vllm"), cfg.engine_profile("trtllm")
    # The same GPU work; the steps differ by the engines' iteration costs alone.
    assert _decode(t, 1, 100) - _decode(m, 1, 100) == pytest.approx(
        (r.base_ms + r.per_seq_ms - v.base_ms - v.per_seq_ms) * 1e-3
    )
    assert _decode(t, 1, 100) > r.base_ms * 1e-3


def test_sampling_traffic_grows_with_the_batch_and_the_vocabulary() -> None:
    base = SurrogateConfig()
    engines = dict(base.engines)
    bytes_per_logit = 80.0  # benchmarks/fit_vllm.py's fit for vLLM, in effect
    assert base.engine_profile("vllm").sampling_bytes_per_logit == bytes_per_logit
    engines["vllm"] = attrs.evolve(engines["vllm"], sampling_bytes_per_logit=0.0)
    none = attrs.evolve(base, engines=engines)
    engines["vllm"] = attrs.evolve(engines["vllm"], sampling_bytes_per_logit=bytes_per_logit)
    cfg = attrs.evolve(base, engines=engines)
    gpu, model = gpus()["L4"], models()["Llama-3.1-8B"]

    def extra(n: int) -> float:
        with_s = _decode(OperatorModel(gpu, model, Config(), cfg=cfg), n, 500 * n)
        without = _decode(OperatorModel(gpu, model, Config(), cfg=none), n, 500 * n)
        return with_s - without

    hbm = gpu.hbm_tb_s * 1e12 * cfg.efficiency_for("L4", "nvidia").memory
    per_seq = model.vocab * bytes_per_logit / hbm
    assert extra(1) == pytest.approx(per_seq, rel=1e-6)
    assert extra(32) == pytest.approx(32 * per_seq, rel=1e-6)
    # Bandwidth-bound: an H100 pays ~11x less per sequence than an L4.
    h100 = _decode(OperatorModel(gpus()["H100-SXM"], model, Config(), cfg=cfg), 32, 16000)
    h100_none = _decode(OperatorModel(gpus()["H100-SXM"], model, Config(), cfg=none), 32, 16000)
    assert h100 - h100_none < extra(32) / 8


def test_step_is_deterministic() -> None:
    a = OperatorModel(gpus()["L4"], models()["Llama-3.1-8B"], Config())
    b = OperatorModel(gpus()["L4"], models()["Llama-3.1-8B"], Config())
    kw = {
        "prefill_tokens": 100,
        "prefill_pairs": 5000.0,
        "decode_seqs": 3,
        "decode_context_tokens": 900,
    }
    assert a.step(**kw) == b.step(**kw)


def test_step_equals_the_sum_of_the_breakdown() -> None:
    for gpu, model, cfg in [
        ("H100-SXM", "Llama-3.1-8B", Config()),
        ("L40S", "Mixtral-8x7B", Config(tp=4, quant="fp8")),
        ("H200", "Qwen3-235B-A22B", Config(tp=4, pp=2, quant="fp8")),
        ("MI300X", "Llama-3.1-405B", Config(tp=8, quant="int4")),
    ]:
        m = OperatorModel(gpus()[gpu], models()[model], cfg)
        for kw in (
            {
                "prefill_tokens": 0,
                "prefill_pairs": 0.0,
                "decode_seqs": 0,
                "decode_context_tokens": 0,
            },
            {
                "prefill_tokens": 0,
                "prefill_pairs": 0.0,
                "decode_seqs": 7,
                "decode_context_tokens": 7000,
            },
            {
                "prefill_tokens": 900,
                "prefill_pairs": 9e5,
                "decode_seqs": 0,
                "decode_context_tokens": 0,
            },
            {
                "prefill_tokens": 300,
                "prefill_pairs": 2e5,
                "decode_seqs": 40,
                "decode_context_tokens": 90000,
            },
        ):
            total = m.step(**kw)
            parts = m.breakdown(**kw).values()
            for field in ("compute_s", "memory_s", "comm_s", "bubble_s", "overhead_s"):
                expect = sum(getattr(x, field) for x in parts)
                assert getattr(total, field) == pytest.approx(expect, rel=1e-12, abs=1e-15), field


def _with_a100_terms(units: float, sync_us: float) -> SurrogateConfig:
    base = SurrogateConfig()
    a100 = attrs.evolve(
        dict(base.gpu_efficiency)["A100-80GB"],
        decode_attention_units=units,
        allreduce_sync_us=sync_us,
    )
    return attrs.evolve(base, gpu_efficiency=dict(base.gpu_efficiency) | {"A100-80GB": a100})


def test_small_decode_batch_reads_the_kv_cache_slower() -> None:
    """A few (sequence, KV head) pairs cannot fill the GPU: the KV read of a long context costs
    more per sequence at batch 1 than at a batch that fills it, and the limit is what makes the
    A100's single-sequence TPOT grow ~3 ms from 200 to 7,000 tokens of context (fit split)."""
    gpu, model = gpus()["A100-80GB"], models()["Llama-3.1-8B"]
    on = OperatorModel(gpu, model, Config(engine="trtllm"), cfg=_with_a100_terms(40.0, 0.0))
    off = OperatorModel(gpu, model, Config(engine="trtllm"), cfg=_with_a100_terms(0.0, 0.0))

    def kv(m: OperatorModel, seqs: int, ctx: int) -> float:
        return m.breakdown(
            prefill_tokens=0, prefill_pairs=0, decode_seqs=seqs, decode_context_tokens=seqs * ctx
        )["attention"].memory_s

    # 8 KV heads per GPU: 40 units need 5 sequences; below that each sequence's read is slower.
    assert kv(on, 1, 7000) == pytest.approx(5.0 * kv(off, 1, 7000))
    assert kv(on, 8, 7000) == pytest.approx(kv(off, 8, 7000))
    growth = _decode(on, 1, 7400) - _decode(on, 1, 300)
    assert 2.0e-3 < growth < 4.0e-3  # measured 2.8 ms (DLI nim.csv, A100 TP1, ISL 200 -> 7000)
    assert _decode(off, 1, 7400) - _decode(off, 1, 300) < 1.0e-3
    # Fewer KV heads per GPU (TP 2: 4) need more sequences to fill it (10, not 5).
    tp2 = Config(engine="trtllm", tp=2)
    tp2_on = OperatorModel(gpu, model, tp2, cfg=_with_a100_terms(40.0, 0.0))
    tp2_off = OperatorModel(gpu, model, tp2, cfg=_with_a100_terms(0.0, 0.0))
    assert kv(tp2_on, 8, 7000) == pytest.approx(1.25 * kv(tp2_off, 8, 7000))


def test_allreduce_sync_cost_grows_with_the_tp_degree() -> None:
    gpu, model = gpus()["A100-80GB"], models()["Llama-3.1-70B"]

    def allreduce(tp: int, sync_us: float) -> float:
        m = OperatorModel(gpu, model, Config(tp=tp), cfg=_with_a100_terms(0.0, sync_us))
        return m.breakdown(
            prefill_tokens=0, prefill_pairs=0, decode_seqs=1, decode_context_tokens=1000
        )["tp_allreduce"].comm_s

    extra = {tp: allreduce(tp, 12.0) - allreduce(tp, 0.0) for tp in (2, 4, 8)}
    # Two all-reduces per layer, 12 µs per ⌈log2 tp⌉ each.
    for tp, doublings in ((2, 1), (4, 2), (8, 3)):
        assert extra[tp] == pytest.approx(2 * model.layers * 12e-6 * doublings)
    assert allreduce(1, 12.0) == 0.0
