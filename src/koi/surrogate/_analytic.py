"""Closed-form serving estimate of one rank: the fast screen and the no-replay fallback.

A fluid model of continuous batching: the running batch ``B`` solves ``B = λ·O·s(B)`` (Little's
law over the decode phase), where the step time ``s`` includes the prefill tokens arriving per
step (``λ·I·s``).  Queueing delay comes from an M/M/1-like wait on the bottleneck utilisation;
overload makes the p99 TTFT the age of the queue after the horizon.

Longer than most modules: the open- and closed-loop estimates share the iteration mix, its
fluid regime and the memos that make the screen cheap (batch shapes per load, the bisection's
mean iteration per shape), and splitting them would split one model over several files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import attrs
from scipy.special import betainc

from koi.surrogate.replay._step import (
    PartsFn,
    StepParts,
    StepTime,
    StepTimeModel,
    parts_of,
    parts_time,
)
from koi.types import LengthDist

__all__ = [
    "RankLoad",
    "Saturation",
    "ServingEstimate",
    "backlog_over",
    "capacity_tok_s",
    "estimate_closed_loop",
    "estimate_open_loop",
    "quantile",
    "saturation",
    "served_rate",
]

_Z99 = 2.3263478740408408  # standard normal 0.99 quantile
_LN100 = math.log(100.0)


def quantile(dist: LengthDist, q: float) -> float:
    """Quantile of the truncated log-normal length distribution (``q`` in (0, 1))."""
    if dist.cv <= 0:
        return min(dist.mean, dist.max)
    sigma2 = math.log1p(dist.cv**2)
    mu = math.log(dist.mean) - sigma2 / 2.0
    z = _Z99 if q == 0.99 else (_Z01 if q == 0.01 else (0.0 if q == 0.5 else _inv_norm(q)))
    return float(min(max(math.exp(mu + z * math.sqrt(sigma2)), 1.0), dist.max))


def _inv_norm(q: float) -> float:
    # Acklam-free: bisection on erf is plenty for the few quantiles used here.
    lo, hi = -8.0, 8.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


_Z01 = _inv_norm(0.01)  # the TPOT tail's shortest outputs ask for it on every estimate


@attrs.frozen
class RankLoad:
    """What one replica serves: its step model, limits and request shape."""

    step_model: StepTimeModel
    kv_capacity_tokens: int
    max_batch_size: int
    max_batched_tokens: int
    input_len: LengthDist
    output_len: LengthDist
    sync_weight: float = 0.5
    mixed_prefill: bool = True  # the engine's iteration scheduler (EngineProfile)
    chunk_admission: bool = False  # the engine's KV admission policy (EngineProfile)
    # The recompute collapse of a chunk-admitting engine (see :func:`_collapse_rate`).
    collapse_requests: float = 300.0
    collapse_dispersion: float = 6.0
    # The step model's times as tuples: the closed form makes millions of steps.
    parts: PartsFn = attrs.field(
        default=attrs.Factory(lambda self: parts_of(self.step_model), takes_self=True),
        init=False,
        eq=False,
        hash=False,
        repr=False,
    )


@attrs.frozen
class ServingEstimate:
    """Per-replica serving estimate (latencies in ms, throughput in output tokens/s)."""

    p50_ttft_ms: float
    p99_ttft_ms: float
    p50_tpot_ms: float
    p99_tpot_ms: float
    throughput_tok_s: float
    capacity_tok_s: float
    utilization: float
    mean_batch: float
    queue_depth: float
    kv_cache_util: float
    preemption_rate: float
    prefill_share: float
    busy_fraction: float
    step: StepTime


def _step(load: RankLoad, prefill: float, seqs: float, ctx_per_seq: float, inp: float) -> StepParts:
    pairs = prefill * inp / 2.0  # a prompt of I tokens has I²/2 causal pairs
    return load.parts(round(prefill), pairs, round(seqs), round(seqs * ctx_per_seq))


def _max_batch(load: RankLoad, ctx: float) -> float:
    return float(max(min(load.max_batch_size, load.kv_capacity_tokens / max(ctx, 1.0)), 1.0))


class _Mix(NamedTuple):
    """Iterations of one replica at request rate ``rate`` with ``seqs`` decoding sequences.

    A share ``p`` of the iterations carries a prefill chunk (``chunks`` per prompt, each
    adding ``delta`` seconds to the decode-only step ``dec``); when prompts arrive faster than
    one chunk per iteration every iteration carries prefill tokens (fluid regime).  Steps are
    :data:`StepParts`, and ``mean_s`` is the mean iteration's time.
    """

    mean: StepParts
    dec: StepParts
    chunk: StepParts
    chunks: int
    p: float
    mean_s: float

    @property
    def delta(self) -> float:
        return max(parts_time(self.chunk) - parts_time(self.dec), 0.0)


def _blend(a: StepParts, b: StepParts, p: float) -> StepParts:
    q = 1 - p
    return (
        q * a[0] + p * b[0],
        q * a[1] + p * b[1],
        q * a[2] + p * b[2],
        q * a[3] + p * b[3],
        q * a[4] + p * b[4],
    )


class _Steps(NamedTuple):
    """The two iterations a mix blends, for one batch shape: decode-only and chunk-carrying."""

    dec: StepParts
    chunk: StepParts
    chunks: int


#: The two iterations of a batch shape, memoized per load (one step model) by everything the
#: step model is asked for them: the prompt mean, its chunks and the rounded sequences and
#: context tokens.  A bisection over the batch narrows to one rounded shape long before its
#: last halving, and one load's estimates at other rates visit the same midpoints.
ShapeMemo = dict[tuple[float, int, int, int], _Steps]

# A memo past this many shapes starts over (a memo, not state).
_SHAPE_MEMO = 4096


def _budget_chunks(load: RankLoad, seqs: float, inp: float) -> tuple[float, int]:
    """The prefill tokens an iteration has beside ``seqs`` decoding sequences, and the chunks
    a prompt of ``inp`` tokens takes at that budget."""
    budget = max(load.max_batched_tokens - seqs, 1.0)
    return budget, max(math.ceil(inp / budget), 1)


def _steps(
    load: RankLoad, seqs: float, ctx: float, inp: float, memo: ShapeMemo | None = None
) -> _Steps:
    chunks = _budget_chunks(load, seqs, inp)[1]
    return _shape_steps(load, inp, chunks, round(seqs), round(seqs * ctx), memo)


def _shape_steps(
    load: RankLoad, inp: float, chunks: int, n: int, n_ctx: int, memo: ShapeMemo | None
) -> _Steps:
    """:func:`_steps` of the batch shape the caller has worked out: ``chunks`` per prompt of
    ``inp`` tokens beside ``n`` decoding sequences holding ``n_ctx`` context tokens."""
    key = (inp, chunks, n, n_ctx)
    hit = memo.get(key) if memo is not None else None
    if hit is None:
        size = inp / chunks
        # The decode-only step first: a scaled step model keeps its time for the mixed one.
        dec = load.parts(0, 0.0, n, n_ctx)
        hit = _Steps(dec, load.parts(round(size), size * inp / 2.0, n, n_ctx), chunks)
        if memo is not None:
            if len(memo) >= _SHAPE_MEMO:
                memo.clear()
            memo[key] = hit
    return hit


def _narrow(
    d: Callable[[float], float],
    lo: float,
    d_lo: float,
    hi: float,
    d_hi: float,
    width: float,
    rtol: float = 0.0,
) -> tuple[float, float]:
    """Narrow ``[lo, hi]`` around a sign change of ``d`` (``d(lo) > 0 >= d(hi)``) to at most
    ``width``: regula falsi with the Anderson–Björck rule (the end kept twice running has its
    value scaled down, so both ends close in), and a halving after three steps that each left
    the bracket wider than half of what it was.  Returns the bracket, or ``(x, x)`` once
    ``|d(x)| <= rtol·x``.

    The closed form's fixed points are nearly linear in their unknown, so this takes a handful
    of evaluations where halving alone takes one per bit; where the step model's rounding or
    a regime change makes ``d`` jump, the halvings keep it about as fast as halving alone.
    """
    side = 0
    slow = 0
    for _ in range(256):  # a halving at least every fourth step: 64 halvings at most
        span = hi - lo
        if span <= width:
            break
        x = (lo * d_hi - hi * d_lo) / (d_hi - d_lo)
        if slow >= 3 or not lo < x < hi:
            x, slow = 0.5 * (lo + hi), 0
        dx = d(x)
        if abs(dx) <= rtol * x or dx != dx:  # converged, or no number to go on
            return x, x
        if dx > 0:
            if side == 1:
                m = 1.0 - dx / d_lo
                d_hi *= m if m > 0 else 0.5
            lo, d_lo, side = x, dx, 1
        else:
            if side == -1:
                m = 1.0 - dx / d_hi
                d_lo *= m if m > 0 else 0.5
            hi, d_hi, side = x, dx, -1
        slow = slow + 1 if hi - lo > 0.5 * span else 0
    return lo, hi


# The fluid regime's fixed point is found to this relative residual (or bracket).
_FLUID_RTOL = 1e-9


def _fluid(
    load: RankLoad, rate: float, st: _Steps, seqs: float, ctx: float, inp: float
) -> tuple[StepParts, float]:
    """The fluid regime's iteration ``s = step(min(λ·I·s, budget))``: its parts and its time.

    The step time grows with the prefill it carries, so ``h(x) = step(min(λ·I·x, budget)) − x``
    is positive at ``x = 0`` (the decode-only step) and the root is either the budget-capped
    step (when the budget binds at it) or inside ``(0, budget / (λ·I))``, where ``h`` changes
    sign and :func:`_narrow` finds it: the step is nearly affine in its prefill.  Iterating
    the map instead converges at the rate of its slope, which is close to 1 near saturation:
    stopped after 20 iterations it fell short of the fixed point by up to a factor of 3 (mostly
    at the rates the searches probe past saturation) and cost twice the step evaluations.
    """
    budget = _budget_chunks(load, seqs, inp)[0]
    s = _step(load, budget, seqs, ctx, inp)
    t_top = parts_time(s)
    x_cap = budget / (rate * inp)
    if t_top >= x_cap:
        return s, t_top

    def excess(x: float) -> float:
        nonlocal s
        s = _step(load, rate * inp * x, seqs, ctx, inp)
        return parts_time(s) - x

    top = t_top - x_cap
    _narrow(excess, 0.0, parts_time(st.dec), x_cap, top, x_cap * _FLUID_RTOL, _FLUID_RTOL)
    return s, parts_time(s)


def _mix_of(load: RankLoad, rate: float, st: _Steps, seqs: float, ctx: float, inp: float) -> _Mix:
    dec, chunk, chunks = st.dec, st.chunk, st.chunks
    t_dec = parts_time(dec)
    delta = max(parts_time(chunk) - t_dec, 0.0)
    load_per_step = rate * chunks * delta
    if load_per_step < 1.0:
        s_bar = t_dec / (1.0 - load_per_step)
        p = rate * chunks * s_bar
        if p <= 1.0:
            mean = _blend(dec, chunk, p)
            return _Mix(mean, dec, chunk, chunks, p, parts_time(mean))
    s, t_s = _fluid(load, rate, st, seqs, ctx, inp)
    return _Mix(s, dec, chunk, chunks, 1.0, t_s)


def _mix(
    load: RankLoad, rate: float, seqs: float, ctx: float, inp: float, memo: ShapeMemo | None = None
) -> _Mix:
    return _mix_of(load, rate, _steps(load, seqs, ctx, inp, memo), seqs, ctx, inp)


def _mean_time(
    load: RankLoad,
    rate: float,
    seqs: float,
    ctx: float,
    inp: float,
    memo: ShapeMemo,
    times: dict[tuple[int, int, int], float],
) -> float:
    """``_mix(load, rate, seqs, ctx, inp).mean_s`` without building the mix: the same
    operations in the same order (the bisection asks for nothing else).

    ``times`` memoizes it for one (load, rate, inp) by the batch shape: below the fluid regime
    the mean iteration depends on ``seqs`` only through the shape.  The fluid regime's is not
    memoized: its search starts from the token budget, ``max_batched_tokens - seqs``.
    """
    # The shape, looked up before its iterations are.
    chunks, n, n_ctx = _budget_chunks(load, seqs, inp)[1], round(seqs), round(seqs * ctx)
    shape = (chunks, n, n_ctx)
    hit = times.get(shape)
    if hit is not None:
        return hit
    st = _shape_steps(load, inp, chunks, n, n_ctx, memo)
    dec, chunk = st.dec, st.chunk
    t_dec = parts_time(dec)
    delta = max(parts_time(chunk) - t_dec, 0.0)
    load_per_step = rate * st.chunks * delta
    if load_per_step < 1.0:
        s_bar = t_dec / (1.0 - load_per_step)
        p = rate * st.chunks * s_bar
        if p <= 1.0:
            q = 1 - p  # _blend's weights, component by component, then parts_time
            t = (
                max(q * dec[0] + p * chunk[0], q * dec[1] + p * chunk[1])
                + (q * dec[2] + p * chunk[2])
                + (q * dec[3] + p * chunk[3])
                + (q * dec[4] + p * chunk[4])
            )
            times[shape] = t
            return t
    return _fluid(load, rate, st, seqs, ctx, inp)[1]


def _batch_at(
    load: RankLoad, rate: float, b_max: float, ctx: float, inp: float, memo: ShapeMemo
) -> float:
    """The running batch ``B = λ·O·s(B)`` below saturation: a bisection on ``[0, b_max]``
    (30 halvings).  Its midpoints' iterations come from ``memo`` and, once the bracket is
    inside one batch shape, from the mean iteration memoized per shape (:func:`_mean_time`).

    Not :func:`_narrow`: ``B − λ·O·s(B)`` can change sign more than once near the fixed point
    (the step model rounds the batch to whole sequences, a fifth of a batch of five), and
    regula falsi finds another crossing than the halvings.  Tried: the planner's choices
    moved with it, and koi lost about a point of online admission over eighteen runs
    (docs/benchmark.md, "Speed").
    """
    out = load.output_len.mean
    times: dict[tuple[int, int, int], float] = {}
    lo, hi = 0.0, b_max
    for _ in range(30):
        mid = (lo + hi) / 2
        if rate * out * _mean_time(load, rate, mid, ctx, inp, memo, times) > mid:
            lo = mid
        else:
            hi = mid
    return hi


# A rate fixed point (saturation, a closed loop) is bracketed to this share of its first upper
# end: far below any difference a prediction shows (the 20 halvings it replaced ended there).
_RATE_WIDTH = 2.0**-20
# A batch short of b by more than this at the search's end is a jump, not its resolution
# (without corrections every chain of the built-in scenarios fills to within 0.2 %).
_FILL_TOLERANCE = 0.01

# Iterations of a closed loop's decoding share at one request rate.
_DECODING_ITERATIONS = 3

#: One replica at saturation: its batch, output tokens per second, iteration mix, and the memo
#: of batch shapes every estimate of the load shares (see :data:`ShapeMemo`).
Saturation = tuple[float, float, _Mix, ShapeMemo]


def saturation(load: RankLoad) -> Saturation:
    """The replica at saturation (KV- or batch-limited): a function of ``load`` alone, so a
    caller that estimates one load at many rates can compute it once and pass it in (with it
    the memo of the load's batch shapes)."""
    inp, out = load.input_len.mean, load.output_len.mean
    ctx = inp + out / 2.0
    b = _max_batch(load, ctx)
    memo: ShapeMemo = {}
    st = _steps(load, b, ctx, inp, memo)  # the batch shape is fixed: only the prefill rate moves

    # Requests finish at λ = b / (O·s(λ)) per second and each brings I prompt tokens, so the
    # mean step s grows with λ and λ·O·s(λ) = b has one root.  Bracketed, not iterating the
    # map: for long prompts (a chunk step ten times a decode step) the map alternates between
    # a decode-only and an all-prefill step and never settles, and stopping on the decode-only
    # side overstated a replica's capacity twofold.
    def short(rate: float) -> float:
        return b - rate * out * _mix_of(load, rate, st, b, ctx, inp).mean_s

    hi = b / (out * parts_time(st.dec))  # s(λ) is at least the decode-only step
    lo, _ = _narrow(short, 0.0, b, hi, short(hi), hi * _RATE_WIDTH)
    mix = _mix_of(load, lo, st, b, ctx, inp)
    # At a root λ·O·s(λ) = b.  Where the mean step jumps past b instead (prompts arrive
    # faster than a prefill slowed far more than its decode can take them in, and the fluid
    # regime runs away), the batch never fills: the replica carries λ·O·s(λ) sequences at the
    # highest rate it keeps up with, and serves λ·O, not b / s(λ) (several times more).
    filled = lo * out * mix.mean_s
    if filled < b * (1.0 - _FILL_TOLERANCE):
        b = filled
    sat = (b, b / mix.mean_s, mix, memo)
    # A replica that would collapse below its saturation is only as good as its stable rate.
    return b, min(sat[1], _collapse_rate(load, sat) * out), mix, memo


# Halvings of the stable rate's bracket: a thousandth of the saturation rate.
_COLLAPSE_HALVINGS = 10


def _collapse_rate(load: RankLoad, sat: Saturation) -> float:
    """The request rate above which a chunk-admitting replica is likely to fall into a
    recompute collapse within ``load.collapse_requests`` requests (``sat``'s rate if never).

    Such an engine admits a prompt once its first slice fits, so when more than
    ``n_fit = KV / (I + O)`` requests are in the replica at once, the admitted ones evict each
    other and a prompt longer than one slice is recomputed again and again; the replica then
    finishes a small share of what it did and, under steady arrivals, never recovers.  The
    requests in the replica (decoding, plus those waiting for their first token: Little's law
    on this estimate) are taken negative-binomial — a burst of prompts slows every decode, so
    the count is over-dispersed, the more so the fewer the KV holds, with shape
    ``n_fit / collapse_dispersion`` — and the replica is stable while the expected number of
    requests that find ``⌈n_fit⌉`` in it, ``collapse_requests · P(N ≥ ⌈n_fit⌉)``, is at most
    one.  ``collapse_requests`` is the shortest replay's; the dispersion was fitted to the
    replay engine (docs/surrogate.md, "Recompute collapse").
    """
    inp, out = load.input_len.mean, load.output_len.mean
    rate_sat = sat[1] / out
    kv = float(load.kv_capacity_tokens)
    n_fit = kv / (inp + out)
    # An evicted prompt of one slice comes back in one iteration; a cache that admits no
    # more than it can finish never evicts.
    if not load.chunk_admission or inp <= load.max_batched_tokens:
        return rate_sat
    if min(float(load.max_batch_size), kv / load.max_batched_tokens) <= n_fit:
        return rate_sat
    level = math.ceil(n_fit)
    shape = max(1.0, n_fit / load.collapse_dispersion)

    def unstable(rate: float) -> bool:
        est = estimate_open_loop(load, rate, 0.0, sat=sat)
        n = est.mean_batch + rate * est.p50_ttft_ms / 1e3
        return load.collapse_requests * float(betainc(level, shape, n / (shape + n))) > 1.0

    if not unstable(rate_sat):
        return rate_sat
    lo, hi = 0.0, rate_sat
    for _ in range(_COLLAPSE_HALVINGS):
        mid = (lo + hi) / 2
        if unstable(mid):
            hi = mid
        else:
            lo = mid
    return lo


def capacity_tok_s(load: RankLoad) -> float:
    """Saturation output tokens per second of one replica (KV- or batch-limited)."""
    return saturation(load)[1]


def served_rate(load: RankLoad, rate_rps: float, sat: Saturation) -> tuple[float, float]:
    """``(utilization, throughput_tok_s)`` of :func:`estimate_open_loop` at ``rate_rps`` (the
    same arithmetic), without its latencies: the offered tokens up to the saturation."""
    out = load.output_len.mean
    cap = sat[1]
    offered = rate_rps * out
    rho = offered / cap
    return min(rho, 1.0), min(offered, cap)


def _ttft(mix: _Mix, q_wait: float) -> tuple[float, float]:
    """(median, mean wait) time to first token: own chunks, the step in flight, prefill queue."""
    service = mix.chunks * parts_time(mix.chunk)
    u = min(mix.p, 0.98)
    wait = service * u / (2.0 * (1.0 - u)) + q_wait
    return service + 0.5 * mix.mean_s + wait, wait


def backlog_over(
    est: ServingEstimate, offered_tok_s: float, ran_s: float, horizon_s: float
) -> ServingEstimate:
    """``est`` of a replica offered ``offered_tok_s`` and run for ``ran_s``, with its backlog
    grown over ``horizon_s`` instead: past saturation the p50 / p99 TTFT carry half / 0.99 of
    the queue's age, ``(1 - 1/ρ)`` times the time it grew (as :func:`estimate_open_loop`)."""
    rho = offered_tok_s / est.capacity_tok_s if est.capacity_tok_s > 0 else math.inf
    if rho <= 1.0 or ran_s == horizon_s or not math.isfinite(rho):
        return est
    shift_ms = (1.0 - 1.0 / rho) * (ran_s - horizon_s) * 1e3
    p50 = max(est.p50_ttft_ms - 0.5 * shift_ms, 0.0)
    return attrs.evolve(
        est, p50_ttft_ms=p50, p99_ttft_ms=max(est.p99_ttft_ms - 0.99 * shift_ms, p50)
    )


def estimate_open_loop(
    load: RankLoad, rate_rps: float, horizon_s: float, *, sat: Saturation | None = None
) -> ServingEstimate:
    """Steady state of one replica fed ``rate_rps`` requests per second (Poisson-like);
    ``sat`` is ``saturation(load)`` when the caller has it."""
    inp, out = load.input_len.mean, load.output_len.mean
    ctx = inp + out / 2.0
    b_max, cap, sat_mix, memo = sat if sat is not None else saturation(load)
    offered = rate_rps * out
    rho = offered / cap
    if rho >= 1.0:
        b, mix = b_max, sat_mix
    else:
        b = _batch_at(load, rate_rps, b_max, ctx, inp, memo)
        mix = _mix(load, rate_rps, b, ctx, inp, memo)
    # Waiting for a batch slot once the replica nears saturation (M/M/1-like on ρ).
    r = min(rho, 0.98)
    slot_wait = mix.mean_s * r / (1.0 - r) if rho > 0.5 else 0.0
    ttft50, wait = _ttft(mix, slot_wait)
    mix99 = _mix(load, rate_rps, b, ctx, quantile(load.input_len, 0.99), memo)
    ttft99 = mix99.chunks * parts_time(mix99.chunk) + mix.mean_s + wait * _LN100 / math.log(2.0)
    queue = rate_rps * wait
    if rho >= 1.0:
        # The queue grows for the whole horizon: the p99 request waits ~ (1 - 1/ρ)·H.
        backlog_age = (1.0 - 1.0 / rho) * horizon_s
        ttft50 += 0.5 * backlog_age
        ttft99 += 0.99 * backlog_age
        queue = (rate_rps - cap / out) * horizon_s / 2.0
    tpot50, tpot99 = _tpot(load, mix, out)
    busy = 1.0 - math.exp(-(b + rate_rps * ttft50))
    return ServingEstimate(
        p50_ttft_ms=ttft50 * 1e3,
        p99_ttft_ms=max(ttft99, ttft50) * 1e3,
        p50_tpot_ms=tpot50 * 1e3,
        p99_tpot_ms=tpot99 * 1e3,
        throughput_tok_s=min(offered, cap),
        capacity_tok_s=cap,
        utilization=min(rho, 1.0),
        mean_batch=b,
        queue_depth=max(queue, 0.0),
        kv_cache_util=min(b * ctx / max(load.kv_capacity_tokens, 1), 1.0),
        preemption_rate=_preemptions(load, b, ctx, out, mix.mean_s),
        prefill_share=_prefill_share(mix),
        busy_fraction=min(busy, 1.0),
        step=StepTime(*mix.mean),
    )


def estimate_closed_loop(
    load: RankLoad, concurrency: float, *, sat: Saturation | None = None
) -> ServingEstimate:
    """Steady state of one replica that always has ``concurrency`` requests in flight (``sat``
    as in :func:`estimate_open_loop`).  With chunk admission (vLLM) more clients than the KV
    cache holds make the engine thrash: see :func:`_thrash`."""
    est = _estimate_closed_loop(load, concurrency, sat if sat is not None else saturation(load))
    waste = _thrash(load, concurrency)
    if waste <= 0.0:
        return est
    # Every completed request also pays ``waste`` prompt recomputations: stretch its prefill.
    inp, out = load.input_len.mean, load.output_len.mean
    chunk = _steps(load, 0.0, 0.0, inp).chunk
    per_request = out / max(est.throughput_tok_s, 1e-12)  # busy seconds per completion
    extra = waste * math.ceil(inp / load.max_batched_tokens) * parts_time(chunk)
    scale = per_request / (per_request + extra)
    return attrs.evolve(
        est,
        throughput_tok_s=est.throughput_tok_s * scale,
        p50_ttft_ms=est.p50_ttft_ms + extra * 1e3,
        p99_ttft_ms=est.p99_ttft_ms + 2.0 * extra * 1e3,
        preemption_rate=est.preemption_rate + waste * est.throughput_tok_s * scale / out,
    )


def _thrash(load: RankLoad, concurrency: float) -> float:
    """Prompt recomputations per completed request when admission outruns the KV cache.

    A chunk-admitting engine admits a prompt once its first slice fits, so it runs up to
    ``n_adm = min(C, max batch, KV / slice)`` sequences while only ``n_fit = KV / (I + O)``
    can finish; each of the ``n_adm − n_fit`` extra sequences is preempted (and its prompt
    recomputed) once per slice it claims, shared over the ``n_fit`` that complete.
    """
    if not load.chunk_admission:
        return 0.0
    inp, out = load.input_len.mean, load.output_len.mean
    kv = float(load.kv_capacity_tokens)
    n_fit = kv / (inp + out)
    n_adm = min(concurrency, float(load.max_batch_size), kv / min(inp, load.max_batched_tokens))
    if n_adm <= n_fit or n_fit <= 0:
        return 0.0
    return (n_adm - n_fit) / n_fit * math.ceil(inp / load.max_batched_tokens)


def _estimate_closed_loop(load: RankLoad, concurrency: float, sat: Saturation) -> ServingEstimate:
    inp, out = load.input_len.mean, load.output_len.mean
    ctx = inp + out / 2.0
    b_max, cap, _, memo = sat
    n_run = min(concurrency, b_max)
    if load.input_len.cv == 0 and load.output_len.cv == 0:
        return _closed_loop_waves(load, concurrency, n_run, cap)
    # The request rate solves λ·(TTFT(λ) + (O − 1)·s(λ)) = n (each running client completes
    # one request per cycle); the cycle grows with λ, so bracket it below the rate of an idle mix.
    # Iterating the map instead alternates for long prompts (see :func:`saturation`).
    decoding, mix, ttft, wait = _closed_loop_mix(load, 0.0, n_run, ctx, inp, memo)
    hi = n_run / (ttft + (out - 1) * mix.mean_s)

    def idle(rate: float) -> float:
        _, m, first, _ = _closed_loop_mix(load, rate, n_run, ctx, inp, memo)
        return n_run - rate * (first + (out - 1) * m.mean_s)

    rate, _ = _narrow(idle, 0.0, n_run, hi, idle(hi), hi * _RATE_WIDTH)
    decoding, mix, ttft, wait = _closed_loop_mix(load, rate, n_run, ctx, inp, memo)
    queued = max(concurrency - n_run, 0.0)
    slot_wait = queued / rate  # Little's law on the requests waiting for a batch slot
    mix99 = _mix(load, rate, decoding, ctx, quantile(load.input_len, 0.99), memo)
    ttft99 = mix99.chunks * parts_time(mix99.chunk) + mix.mean_s + wait * _LN100 / math.log(2.0)
    tpot50, tpot99 = _tpot(load, mix, out)
    return ServingEstimate(
        p50_ttft_ms=(ttft + slot_wait) * 1e3,
        p99_ttft_ms=max(ttft99 + slot_wait, ttft + slot_wait) * 1e3,
        p50_tpot_ms=tpot50 * 1e3,
        p99_tpot_ms=tpot99 * 1e3,
        throughput_tok_s=rate * out,
        capacity_tok_s=cap,
        utilization=min(rate * out / cap, 1.0),
        mean_batch=decoding,
        queue_depth=queued,
        kv_cache_util=min(n_run * ctx / max(load.kv_capacity_tokens, 1), 1.0),
        preemption_rate=_preemptions(load, n_run, ctx, out, mix.mean_s),
        prefill_share=_prefill_share(mix),
        busy_fraction=1.0,
        step=StepTime(*mix.mean),
    )


def _closed_loop_mix(
    load: RankLoad, rate: float, n_run: float, ctx: float, inp: float, memo: ShapeMemo
) -> tuple[float, _Mix, float, float]:
    """``(decoding, mix, ttft, wait)`` of ``n_run`` clients at request rate ``rate``: the
    decoding share of the clients is their decode time over the cycle, a fixed point that
    settles (the mean step grows slowly with the batch)."""
    out = load.output_len.mean
    decoding = n_run
    mix = _mix(load, rate, decoding, ctx, inp, memo)
    ttft, wait = _ttft(mix, 0.0)
    for _ in range(_DECODING_ITERATIONS):
        decoding = n_run * (out - 1) * mix.mean_s / (ttft + (out - 1) * mix.mean_s)
        mix = _mix(load, rate, max(decoding, 0.0), ctx, inp, memo)
        ttft, wait = _ttft(mix, 0.0)
    return decoding, mix, ttft, wait


def _closed_loop_waves(
    load: RankLoad, concurrency: float, n_run: float, cap: float
) -> ServingEstimate:
    """Closed loop with fixed lengths: clients that start together stay in lock-step.

    Each cycle prefills the whole wave (``n·I`` tokens in chunks of ``max_batched_tokens``,
    time ``T_p``), then decodes ``O - 1`` iterations at batch ``n``.  A request's first token
    comes on average half-way through the wave prefill; early finishers decode alongside the
    remaining prefill chunks, which lengthens their TPOT.
    """
    inp, out = load.input_len.mean, load.output_len.mean
    ctx = inp + out / 2.0
    wave = n_run * inp
    budget = float(load.max_batched_tokens)
    k = max(math.ceil(wave / budget), 1)
    size = wave / k
    chunk = load.parts(round(size), size * inp / 2.0, 0, 0)
    t_p = k * parts_time(chunk)
    dec = _step(load, 0.0, n_run, ctx, inp)
    t_dec = parts_time(dec)
    lockstep = t_p * (1.0 + 1.0 / k) / 2.0
    dispersed, _ = _ttft(_mix(load, 0.0, n_run, ctx, inp), 0.0)
    # Real clients drift out of lock-step; blend the two limits in log space.  A prefill-first
    # engine pauses decodes while a wave prefills, so its waves stay together.
    w = load.sync_weight if load.mixed_prefill else 1.0
    ttft = lockstep**w * dispersed ** (1.0 - w)
    extra = t_p * (1.0 - 1.0 / k) / 2.0 / max(out - 1.0, 1.0)
    tpot = t_dec + extra
    cycle = t_p + (out - 1.0) * t_dec
    rate = n_run / cycle
    slot_wait = max(concurrency - n_run, 0.0) / rate
    p = t_p / cycle  # share of time spent in prefill iterations
    mean = _blend(dec, chunk, k * p / (k * p + (out - 1.0) * (1.0 - p)) if cycle > 0 else 0.0)
    return ServingEstimate(
        p50_ttft_ms=(ttft + slot_wait) * 1e3,
        p99_ttft_ms=(max(t_p, ttft) + slot_wait) * 1e3,
        p50_tpot_ms=tpot * 1e3,
        p99_tpot_ms=(t_dec + 2.0 * extra) * 1e3,
        throughput_tok_s=rate * out,
        capacity_tok_s=cap,
        utilization=min(rate * out / cap, 1.0) if cap > 0 else 1.0,
        mean_batch=n_run * (1.0 - p),
        queue_depth=max(concurrency - n_run, 0.0),
        kv_cache_util=min(n_run * ctx / max(load.kv_capacity_tokens, 1), 1.0),
        preemption_rate=_preemptions(load, n_run, ctx, out, t_dec),
        prefill_share=min(p, 1.0),
        busy_fraction=1.0,
        step=StepTime(*mean),
    )


def _tpot(load: RankLoad, mix: _Mix, out: float) -> tuple[float, float]:
    """Median and p99 time per output token.

    A request's TPOT is its mean iteration over its decode: ``dec + k·Δ/(O-1)`` with ``k`` the
    iterations that carried a prefill chunk, binomial(O-1, p) (normal approximation).
    """
    n = max(out - 1.0, 1.0)
    o_short = max(quantile(load.output_len, 0.01) - 1.0, 1.0) if load.output_len.cv > 0 else n
    p = mix.p
    p50 = mix.mean_s
    k99 = o_short * p + _Z99 * math.sqrt(o_short * p * (1.0 - p))
    p99 = parts_time(mix.dec) + k99 * mix.delta / o_short
    return p50, max(p99, p50)


def _preemptions(load: RankLoad, b: float, ctx: float, out: float, step_s: float) -> float:
    """KV evictions per second: the share of the batch whose p99 context does not fit."""
    spread = ctx * (1.0 + _Z99 * load.output_len.cv / 2.0)
    overflow = b * spread - load.kv_capacity_tokens
    if overflow <= 0 or b <= 0:
        return 0.0
    return overflow / spread / (out * step_s)


def _prefill_share(mix: _Mix) -> float:
    """Share of busy time spent in iterations that carry prefill tokens."""
    t = mix.mean_s
    return min(max(mix.p * parts_time(mix.chunk) / t, 0.0), 1.0) if t > 0 else 0.0
