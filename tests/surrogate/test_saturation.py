"""The closed form's two rate fixed points — a replica at saturation, and a closed loop of
clients — are solved, not iterated: for long prompts (a chunk-carrying step many times a
decode step) iterating the maps alternated between a decode-only and an all-prefill step and
stopped on the decode-only side, about twice the capacity the step model allows."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable

import pytest
from tests._support.specs import H100_NODE, L40S_NODE, gpus, models, summary_job

from koi.surrogate import RankCorrection, Surrogate
from koi.surrogate._analytic import (
    RankLoad,
    _estimate_closed_loop,
    _mix,
    _narrow,
    estimate_open_loop,
    saturation,
)
from koi.surrogate.replay import parts_time
from koi.types import (
    Chain,
    Config,
    Job,
    Ladder,
    LengthDist,
    Quant,
    Rank,
    ServingTarget,
    WorkloadProfile,
)


def _load(inp: int, out: int, *, budget: int = 8192) -> RankLoad:
    """Llama-3.1-70B in FP8 on four H100s, the shape of a summarization service."""
    sur = Surrogate(gpus(), models())
    config = Config(tp=4, quant=Quant.FP8)
    step, _ = sur.step_model(sur.gpus["H100-SXM"], sur.models["Llama-3.1-70B"], config)
    return RankLoad(
        step,
        kv_capacity_tokens=670_000,
        max_batch_size=256,
        max_batched_tokens=budget,
        input_len=LengthDist(inp, 0.3, 2 * inp),
        output_len=LengthDist(out, 0.4, 4 * out),
    )


_SHAPES = [(24_000, 600), (20_000, 500), (6_000, 300), (800, 200), (200, 1_000)]


@pytest.mark.parametrize(("inp", "out"), _SHAPES)
def test_saturation_solves_its_fixed_point(inp: int, out: int) -> None:
    """At the capacity returned, requests finish at b / (O·s) per second with s the mean step
    of that very rate (to the step model's rounding)."""
    load = _load(inp, out)
    b, cap, _, memo = saturation(load)
    rate = cap / out
    s = _mix(load, rate, b, inp + out / 2, inp, memo).mean_s
    assert rate * out * s == pytest.approx(b, rel=0.01)


def test_long_prompts_are_bound_by_prefill() -> None:
    """Every request brings 24K prompt tokens: a replica completes no more requests per second
    than its token budget prefills, one full-budget step at a time."""
    inp, out = 24_000, 600
    load = _load(inp, out)
    b, cap, _, _ = saturation(load)
    budget = load.max_batched_tokens - b
    full = load.parts(round(budget), budget * inp / 2, round(b), round(b * (inp + out / 2)))
    assert cap / out <= budget / (inp * parts_time(full)) * 1.01


def test_the_bracket_narrows_in_few_steps_and_survives_jumps() -> None:
    """The closed form's fixed points are nearly linear in their unknown: narrowed in a few
    evaluations, not one per bit; a function that jumps across zero is still bracketed to the
    width asked, in at most about twice the halvings."""
    calls: list[float] = []

    def line(x: float) -> float:
        calls.append(x)
        return 3.0 - 2.0 * x - 0.01 * x * x

    lo, hi = _narrow(line, 0.0, 3.0, 10.0, line(10.0), 1e-9)
    assert hi - lo <= 1e-9
    assert line(lo) >= 0 >= line(hi)
    assert len(calls) <= 12  # halving alone: 34

    calls.clear()

    def jump(x: float) -> float:
        calls.append(x)
        return 1.0 if x < math.pi else -5.0

    lo, hi = _narrow(jump, 0.0, 1.0, 10.0, -5.0, 1e-6)
    assert lo < math.pi <= hi
    assert hi - lo <= 1e-6
    assert len(calls) <= 2 * math.ceil(math.log2(10.0 / 1e-6)) + 2


@pytest.mark.parametrize(("inp", "out"), _SHAPES)
@pytest.mark.parametrize("seqs", [8, 64, 200])
def test_the_fluid_step_is_its_own_fixed_point(inp: int, out: int, seqs: int) -> None:
    """Where prompts arrive faster than one chunk per iteration, every iteration carries
    ``min(λ·I·s, budget)`` prefill tokens and lasts ``s``: the mean step returned is that fixed
    point at every rate, also near saturation, where the map's slope is close to 1 and 20
    plain iterations stopped short of it by up to a factor of 3."""
    load = _load(inp, out)
    ctx = inp + out / 2
    budget = load.max_batched_tokens - seqs
    dec = parts_time(load.parts(0, 0.0, seqs, round(seqs * ctx)))
    top = load.parts(round(budget), budget * inp / 2, seqs, round(seqs * ctx))
    # From the rate a decode-only step would prefill one budget per step to twice the rate
    # the full-budget step keeps up with: the map's slope runs through 1 in between.
    lo, hi = budget / (inp * dec) / 20, 2 * budget / (inp * parts_time(top))
    fluid = 0
    for k in range(41):
        rate = lo * (hi / lo) ** (k / 40)
        mix = _mix(load, rate, seqs, ctx, inp)
        if mix.p < 1.0:
            continue
        fluid += 1
        prefill = min(rate * inp * mix.mean_s, budget)
        step = load.parts(round(prefill), prefill * inp / 2, seqs, round(seqs * ctx))
        assert parts_time(step) == pytest.approx(mix.mean_s, rel=1e-6), rate
    assert fluid >= 10


@pytest.mark.parametrize(("inp", "out"), _SHAPES)
def test_open_loop_capacity_is_monotone_in_the_rate(inp: int, out: int) -> None:
    """At 70 % of the capacity the offered tokens are served; 20 % past it p99 TTFT is
    higher (the old iteration's optimistic side put saturation where a replica was still
    all prefill, so a rate past the real capacity read as comfortably below it)."""
    load = _load(inp, out)
    sat = saturation(load)
    cap = sat[1]
    low = estimate_open_loop(load, 0.7 * cap / out, 300.0, sat=sat)
    high = estimate_open_loop(load, 1.2 * cap / out, 300.0, sat=sat)
    assert low.throughput_tok_s == pytest.approx(0.7 * cap)
    assert high.p99_ttft_ms > low.p99_ttft_ms


@pytest.mark.parametrize(("inp", "out"), _SHAPES)
@pytest.mark.parametrize("clients", [4, 16, 64])
def test_closed_loop_cycle(inp: int, out: int, clients: int) -> None:
    """Each running client completes one request per cycle (its TTFT, then O − 1 decode steps),
    and a closed loop completes no faster than the replica's saturation (no thrashing charged:
    the cycle alone)."""
    load = _load(inp, out)
    sat = saturation(load)
    est = _estimate_closed_loop(load, clients, sat)
    running = min(clients, sat[0])
    rate = est.throughput_tok_s / out
    slot_wait = max(clients - running, 0.0) / rate
    cycle = est.p50_ttft_ms / 1e3 - slot_wait + (out - 1) * est.step.time_s
    assert rate * cycle == pytest.approx(running, rel=0.01)
    assert est.throughput_tok_s <= sat[1] * 1.01


def _classifier() -> Job:
    """Thousand-token documents labelled in four tokens: prefill is nearly all the work."""
    w = WorkloadProfile(LengthDist(1000, 0.5, 4096), LengthDist(4, 0.3, 16), rate_rps=36)
    target = ServingTarget.online(p99_ttft_ms=200, p99_tpot_ms=50)
    return Job(id="classify", model="Llama-3.2-1B", job_class="online", workload=w, target=target)


def _always(corr: RankCorrection) -> Callable[[Chain], RankCorrection]:
    return lambda _chain: corr


@pytest.mark.parametrize("quant", [Quant.FP8, Quant.BF16])
def test_a_slower_prefill_never_raises_the_capacity(quant: Quant) -> None:
    """A correction that slows prefill 2.6× beside a decode 0.6× as long once left the mean
    step of the highest stable rate far below the saturated batch's (the fluid regime runs
    away past it), and the capacity read b / s there: about seven times the replica's with
    the prefill uncorrected.  The replica serves the rate it keeps up with."""
    sur = Surrogate(gpus(), models())
    job = _classifier()
    chain = Chain(job.model, L40S_NODE, Config(tp=1, quant=quant, max_batch_size=64))

    def capacity(prefill_time: float, decode_time: float) -> float:
        corr = RankCorrection(prefill_time=prefill_time, decode_time=decode_time)
        got = sur.capacity(job, chain, corrections=_always(corr))
        assert got is not None
        return got

    base = capacity(1.0, 1.0)
    for decode in (0.59, 0.6, 0.62):
        decode_only = capacity(1.0, decode)
        for prefill in (1.2, 1.6, 2.0, 2.3, 2.6, 3.0):
            got = capacity(prefill, decode)
            assert got <= decode_only * 1.001, (prefill, decode)
            # Every step at least ``decode`` × its uncorrected length: at most 1 / decode.
            assert got <= base / decode * 1.001, (prefill, decode)


def _chat(rate: float, ttft_ms: float) -> Job:
    w = WorkloadProfile(LengthDist(1200, 0.5, 8000), LengthDist(250, 0.5, 2000), rate_rps=rate)
    target = ServingTarget.online(p99_ttft_ms=ttft_ms, p99_tpot_ms=60)
    return Job(id="chat", model="Llama-3.1-8B", job_class="online", workload=w, target=target)


def test_steps_at_least_m_times_as_long_carry_at_most_one_mth() -> None:
    """Over random step corrections (factors in [1/e, e]): a replica whose steps are each at
    least ``m = min(prefill, decode)`` times as long carries at most ``1 / m`` times its
    uncorrected capacity — what the jump above broke seven-fold."""
    sur = Surrogate(gpus(), models())
    rng = random.Random(3)
    asked = 0
    jobs = [_chat(6.0, 1500), _chat(20.0, 250), _classifier()]
    shapes = itertools.product(jobs, (H100_NODE, L40S_NODE), (1, 2, 4), (Quant.BF16, Quant.FP8))
    for job, env, tp, quant in shapes:
        for batch in (64, 256):
            chain = Chain(job.model, env, Config(tp=tp, quant=quant, max_batch_size=batch))
            base = sur.capacity(job, chain)
            if base is None:
                continue
            for _ in range(12):
                prefill, decode = (math.exp(rng.uniform(-1.0, 1.0)) for _ in range(2))
                corr = RankCorrection(prefill_time=prefill, decode_time=decode)
                got = sur.capacity(job, chain, corrections=_always(corr))
                assert got is not None
                assert got <= base / min(prefill, decode) * 1.0001, (chain, corr)
                asked += 1
    assert asked > 600


def test_a_saturated_rank_waits_less_with_more_replicas() -> None:
    """Past saturation the p99 TTFT is the backlog's age after a horizon; that horizon is the
    same for every size of the rank, so more replicas (a smaller ρ) mean a shorter wait.  It was
    the horizon of the replicas a replay runs (at most two), stretched as their share of the
    traffic fell: sixteen L40S replicas of 20K-token summaries were predicted to wait 3.2 times
    as long as one, and koi shrank hopeless services toward nothing (hetero-3h)."""
    sur = Surrogate(gpus(), models())
    job = summary_job(1.8)
    chain = Chain("Qwen3-32B", L40S_NODE, Config(tp=2, quant=Quant.FP8))
    for predict in (sur.screen, sur.predict):
        waits = []
        for n in (1, 2, 3, 4, 8, 16):
            pred = predict(job, Ladder((Rank(chain, n),)), now_s=0.0)
            assert pred.ranks[0].capacity_tok_s < 1.8 * 500  # every size saturated
            waits.append(pred.outcomes.p99_ttft_ms)
        assert waits == sorted(waits, reverse=True)
        assert waits[-1] < 0.7 * waits[0]
