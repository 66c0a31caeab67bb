"""The closed form's memos (each load's batch-shape iterations shared by its estimates, the
bisection's mean iteration per shape, a scaled step model's decode-only times) give exactly
what the plain computation gives: the same batch from the bisection, the same estimates."""

from __future__ import annotations

import random
from typing import Any

import attrs
from tests._support.specs import gpus, models

from koi.surrogate import Surrogate
from koi.surrogate._analytic import (
    RankLoad,
    Saturation,
    _batch_at,
    _mix,
    estimate_closed_loop,
    estimate_open_loop,
    saturation,
)
from koi.surrogate._correct import ScaledStepModel
from koi.types import Config, LengthDist, Quant


class _NoMemo(dict[Any, Any]):
    """A memo that never keeps anything: every batch shape is computed afresh."""

    def __setitem__(self, key: Any, value: Any) -> None:
        return None


def _loads() -> list[RankLoad]:
    """Dense and MoE models, tensor and pipeline parallel, uncorrected and corrected (scaled)
    step models, short and long prompts, token budgets that chunk prompts and cap the fluid
    regime's prefill."""
    sur = Surrogate(gpus(), models())
    g, m = sur.gpus, sur.models
    out: list[RankLoad] = []
    cases = [
        ("H100-SXM", "Llama-3.1-8B", Config(tp=1)),
        ("H100-SXM", "Llama-3.1-70B", Config(tp=4, quant=Quant.FP8)),
        ("A100-80GB", "Mixtral-8x7B", Config(tp=2, pp=2)),
        ("L40S", "Qwen3-8B", Config(tp=1, quant=Quant.INT4, max_batch_size=64)),
    ]
    for gpu, model, config in cases:
        base, _ = sur.step_model(g[gpu], m[model], config)
        steps = [base, ScaledStepModel(base, prefill=1.3, decode=0.85)]
        for step in steps:
            for inp, out_len, budget in ((800, 200, 8192), (6000, 150, 2048), (3000, 400, 512)):
                out.append(
                    RankLoad(
                        step,
                        kv_capacity_tokens=400_000,
                        max_batch_size=config.max_batch_size,
                        max_batched_tokens=budget,
                        input_len=LengthDist(inp, 0.6, 8 * inp),
                        output_len=LengthDist(out_len, 0.5, 4000),
                    )
                )
    return out


def _plain_batch(load: RankLoad, rate: float, b_max: float) -> float:
    """The bisection as it was before the memos: every midpoint's full iteration mix."""
    inp, out = load.input_len.mean, load.output_len.mean
    ctx = inp + out / 2.0
    lo, hi = 0.0, b_max
    for _ in range(30):
        mid = (lo + hi) / 2
        if rate * out * _mix(load, rate, mid, ctx, inp).mean_s > mid:
            lo = mid
        else:
            hi = mid
    return hi


def _rates(cap_tok_s: float, out: float) -> list[float]:
    """Request rates from a trickle to just below saturation (and two above it)."""
    sat_rps = cap_tok_s / out
    return [sat_rps * u for u in (0.002, 0.03, 0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 0.95, 0.99, 1.2)]


def _unmemoized(sat: Saturation) -> Saturation:
    b, cap, mix, _ = sat
    return b, cap, mix, _NoMemo()


def test_bisection_with_memos_finds_the_plain_bisections_batch() -> None:
    rnd = random.Random(0)
    checked = fluid_capped = 0
    for load in _loads():
        b_max, cap, _, memo = saturation(load)
        inp, out = load.input_len.mean, load.output_len.mean
        rates = [r for r in _rates(cap, out) if r * out < cap]
        rnd.shuffle(rates)  # the load's memo is shared across rates, in any order
        for rate in rates:
            got = _batch_at(load, rate, b_max, inp + out / 2.0, inp, memo)
            assert got == _plain_batch(load, rate, b_max)
            checked += 1
            fluid_capped += rate * inp * cap > load.max_batched_tokens * out
    assert checked >= 200
    assert fluid_capped > 0  # some cases reach the token budget's cap


def test_estimates_sharing_a_loads_memo_equal_unmemoized_ones() -> None:
    rnd = random.Random(1)
    asked = 0
    for load in _loads():
        shared = saturation(load)
        cap, out = shared[1], load.output_len.mean
        questions: list[tuple[str, float]] = [("open", r) for r in _rates(cap, out)]
        questions += [("closed", c) for c in (1.0, 3.0, 17.0, 64.0, 300.0)]
        rnd.shuffle(questions)
        for kind, x in questions:
            fresh = _unmemoized(saturation(load))
            if kind == "open":
                got = estimate_open_loop(load, x, 30.0, sat=shared)
                want = estimate_open_loop(load, x, 30.0, sat=fresh)
            else:
                got = estimate_closed_loop(load, x, sat=shared)
                want = estimate_closed_loop(load, x, sat=fresh)
            assert attrs.astuple(got) == attrs.astuple(want), (kind, x)
            asked += 1
    assert asked >= 300


def test_scaled_step_models_decode_memo_returns_the_unmemoized_times() -> None:
    sur = Surrogate(gpus(), models())
    base, _ = sur.step_model(sur.gpus["H100-SXM"], sur.models["Llama-3.1-8B"], Config(tp=2))
    kept = ScaledStepModel(base, prefill=1.4, decode=0.9)
    shapes = [
        (p, 3 * p / 2.0, n, n * ctx)
        for p in (0, 64, 512, 2048)
        for n in (0, 1, 8, 64)
        for ctx in (300, 900)
    ]
    for args in shapes * 3:  # asked again: the memo answers
        p, pairs, n, c = args
        want = ScaledStepModel(base, prefill=1.4, decode=0.9).step(
            prefill_tokens=p, prefill_pairs=pairs, decode_seqs=n, decode_context_tokens=c
        )
        got = kept.step(
            prefill_tokens=p, prefill_pairs=pairs, decode_seqs=n, decode_context_tokens=c
        )
        assert got == want
    assert kept == ScaledStepModel(base, prefill=1.4, decode=0.9)  # the memo is not a value
