"""Load protocols, statistics as measured, the per-request floor and KV capacity per engine
(issue 22, docs/surrogate.md §7 "Load protocols").
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from tests._support.accuracy import protocol_of, protocol_source, rows
from tests._support.specs import gpus, models

from koi.errors import InvalidInput
from koi.surrogate import (
    LoadProtocol,
    ServingPrediction,
    SurrogateConfig,
    feasibility,
    predict_serving,
    protocol_preset,
)
from koi.types import Config


def _h100_8b(protocol: LoadProtocol) -> ServingPrediction:
    return predict_serving(
        gpus()["H100-SXM"],
        models()["Llama-3.1-8B"],
        Config(tp=1),
        isl=2000,
        osl=200,
        protocol=protocol,
    )


def test_burst_raises_mean_ttft_over_the_steady_state() -> None:
    # Desynchronised clients (±20 % lengths): in steady state few prompts queue together, but a
    # burst run starts all 64 at t = 0 and its mean carries that first wave.
    burst = _h100_8b(LoadProtocol.closed_loop(64, length_spread=0.2))
    steady = _h100_8b(LoadProtocol.closed_loop(64, length_spread=0.2, burst=False))
    assert burst.mean_ttft_ms > 1.2 * steady.mean_ttft_ms
    # The mean of a burst run sits above its median: the first wave's long queue is a tail.
    assert burst.mean_ttft_ms > burst.p50_ttft_ms


def test_length_spread_breaks_lock_step_waves() -> None:
    # Fixed lengths keep the clients in lock-step: each wave of prompts waits for the whole
    # wave's prefill.  Spread lengths scatter completions, so prompts arrive one by one.
    fixed = _h100_8b(LoadProtocol.closed_loop(64, burst=False))
    spread = _h100_8b(LoadProtocol.closed_loop(64, length_spread=0.2, burst=False))
    assert spread.mean_ttft_ms < 0.7 * fixed.mean_ttft_ms


def test_the_floor_dominates_light_load() -> None:
    cfg = SurrogateConfig()
    base = attrs.evolve(
        cfg, engines={k: attrs.evolve(v, request_floor_ms=0.0) for k, v in cfg.engines}
    )
    floored = attrs.evolve(
        base,
        engines={k: attrs.evolve(v, request_floor_ms=100.0) for k, v in base.engines},
    )
    one = LoadProtocol.closed_loop(1)
    model, gpu = models()["Llama-3.1-8B"], gpus()["H100-SXM"]

    def run(cfg: SurrogateConfig) -> ServingPrediction:
        return predict_serving(gpu, model, Config(tp=1), isl=100, osl=50, protocol=one, cfg=cfg)

    without, with_floor = run(base), run(floored)
    added = with_floor.mean_ttft_ms - without.mean_ttft_ms
    assert added == pytest.approx(100.0, abs=0.5)
    # One short request: the GPU's prefill is a small part of the floored TTFT ...
    assert with_floor.mean_ttft_ms > 2.0 * without.mean_ttft_ms
    # ... and the floor lengthens every client's cycle, so throughput drops.
    assert with_floor.throughput_tok_s < without.throughput_tok_s


def test_fp8_kv_cache_raises_capacity() -> None:
    gpu, model = gpus()["H100-SXM"], models()["Llama-3.1-70B"]
    cfg = SurrogateConfig()

    def kv(**kw: object) -> int:
        config = attrs.evolve(Config(tp=2), **kw)
        return feasibility(gpu, model, config, cfg=cfg).kv_capacity_tokens

    # Asked for by flag (vLLM --kv-cache-dtype fp8): about twice the tokens.
    bf16, fp8 = kv(engine="vllm", quant="fp8"), kv(engine="vllm", quant="fp8", kv_cache_dtype="fp8")
    assert fp8 == pytest.approx(2 * bf16, rel=0.01)
    # An engine that takes an FP8 checkpoint's KV dtype at "auto" (TensorRT-LLM with a checkpoint
    # carrying FP8 KV scales) gets the FP8 capacity without the flag; vLLM does not.
    eng = dict(cfg.engines)
    carries = attrs.evolve(
        cfg, engines=eng | {"trtllm": attrs.evolve(eng["trtllm"], fp8_checkpoint_kv=True)}
    )
    trt = Config(tp=2, engine="trtllm", quant="fp8")
    plain = feasibility(gpu, model, trt, cfg=cfg).kv_capacity_tokens
    fp8_ckpt = feasibility(gpu, model, trt, cfg=carries).kv_capacity_tokens
    assert fp8_ckpt == pytest.approx(2 * plain, rel=0.01)
    assert (
        kv(engine="vllm", quant="fp8")
        == feasibility(
            gpu, model, Config(tp=2, engine="vllm", quant="fp8"), cfg=carries
        ).kv_capacity_tokens
    )


def test_engines_size_their_kv_pools_differently() -> None:
    gpu, model = gpus()["H100-SXM"], models()["Llama-3.1-8B"]

    def kv(engine: str) -> int:
        return feasibility(gpu, model, Config(tp=1, engine=engine)).kv_capacity_tokens

    # SGLang's static pool leaves activations and graphs outside u·M, so it holds the most;
    # vLLM subtracts them from u·M; TensorRT-LLM takes u of what is left after weights and
    # reserves (more than vLLM's: the 10 % it leaves is of less memory).
    vllm, sglang, trt = kv("vllm"), kv("sglang"), kv("trtllm")
    assert sglang > trt > vllm


def test_protocol_validation_and_presets() -> None:
    with pytest.raises(InvalidInput, match="exactly one"):
        LoadProtocol()
    with pytest.raises(InvalidInput, match="request_count"):
        LoadProtocol(concurrency=8, request_count=4)
    with pytest.raises(InvalidInput, match="length_spread"):
        LoadProtocol.closed_loop(8, length_spread=1.5)
    with pytest.raises(InvalidInput, match="length_range"):
        LoadProtocol(concurrency=8, length_range=(1.2, 1.0))
    assert LoadProtocol.closed_loop(8).requests == 80
    imax = protocol_preset("inferencemax", concurrency=16)
    assert (imax.burst, imax.requests, imax.length_range) == (True, 160, (0.8, 1.0))
    assert not protocol_preset("genai-perf-steady", concurrency=4).burst
    assert protocol_preset("poisson", rate_rps=2.0).rate_rps == 2.0
    with pytest.raises(InvalidInput, match="protocol"):
        protocol_preset("locust", concurrency=4)
    lengths = imax.lengths(1000, np.random.default_rng(0), 500)
    assert lengths.min() >= 800
    assert lengths.max() <= 1000
    assert lengths.std() > 30


def test_every_measurement_row_has_its_sources_protocol_with_evidence() -> None:
    for row in rows():
        entry = protocol_source(row)
        assert entry["evidence"]
        assert entry["statistic"] in ("mean", "p50")
        p = protocol_of(row)
        assert p.concurrency == int(row["concurrency"])
    held = {protocol_source(r)["protocol"] for r in rows("heldout")}
    assert held == {"inferencemax", "genai-perf-count"}
