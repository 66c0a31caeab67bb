"""Run the replay engine for one rank and turn its window into a :class:`ServingEstimate`.

The replay engine (``koi.surrogate.replay``) is a sibling package; when it is unavailable the
closed-form estimate stands in, so the API works the same either way.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from koi.surrogate._analytic import (
    RankLoad,
    Saturation,
    ServingEstimate,
    backlog_over,
    estimate_closed_loop,
    estimate_open_loop,
    saturation,
)
from koi.surrogate._config import SurrogateConfig
from koi.surrogate._protocol import LoadProtocol
from koi.surrogate.replay import StepCache
from koi.surrogate.replay._step import StepTime
from koi.types import Arrival, Routing, WorkloadProfile

__all__ = [
    "ProtocolRun",
    "replay_available",
    "replay_closed_loop",
    "replay_open_loop",
    "replay_protocol",
]


def _engine() -> Any | None:
    try:
        from koi.surrogate import replay
    except ImportError:  # pragma: no cover - the package always imports
        return None
    needed = ("ReplayEngine", "ReplicaSpec", "sample_requests", "batch_requests")
    return replay if all(hasattr(replay, n) for n in needed) else None


def replay_available() -> bool:
    """Whether the replay engine is importable (otherwise predictions are closed-form)."""
    return _engine() is not None


def _specs(
    mod: Any, load: RankLoad, replicas: int, step_cache: StepCache | None = None
) -> list[Any]:
    spec = mod.ReplicaSpec(
        step_model=load.step_model if step_cache is None else step_cache,
        kv_capacity_tokens=load.kv_capacity_tokens,
        max_batch_size=load.max_batch_size,
        max_batched_tokens=load.max_batched_tokens,
        mixed_prefill=load.mixed_prefill,
        chunk_admission=load.chunk_admission,
    )
    return [spec] * replicas


def _estimate(
    stats: Any, analytic: ServingEstimate, replicas: int, *, expected_tok_s: float | None = None
) -> ServingEstimate:
    ttft = np.asarray(stats.ttft_ms, dtype=float)
    censored = np.concatenate([ttft, np.asarray(stats.unserved_age_ms, dtype=float)])
    tpot = np.asarray(stats.tpot_ms, dtype=float)
    busy = float(stats.busy_s)
    step = (
        StepTime(
            compute_s=stats.compute_s / busy,
            memory_s=stats.memory_s / busy,
            comm_s=stats.comm_s / busy,
            bubble_s=stats.bubble_s / busy,
            overhead_s=stats.overhead_s / busy,
        )
        if busy > 0
        else analytic.step
    )

    def pct(a: np.ndarray, q: float, fallback: float) -> float:
        return float(np.percentile(a, q)) if a.size else fallback

    return ServingEstimate(
        p50_ttft_ms=pct(censored, 50, analytic.p50_ttft_ms),
        p99_ttft_ms=pct(censored, 99, analytic.p99_ttft_ms),
        p50_tpot_ms=pct(tpot, 50, analytic.p50_tpot_ms),
        p99_tpot_ms=pct(tpot, 99, analytic.p99_tpot_ms),
        throughput_tok_s=(
            expected_tok_s if expected_tok_s is not None else stats.throughput_tok_s / replicas
        ),
        capacity_tok_s=analytic.capacity_tok_s,
        utilization=analytic.utilization,
        mean_batch=stats.mean_batch_size,
        queue_depth=stats.queue_depth,
        kv_cache_util=stats.kv_cache_util,
        preemption_rate=stats.preemption_rate,
        prefill_share=stats.prefill_share,
        busy_fraction=stats.busy_fraction,
        step=step,
    )


def replay_horizon(rate: float, cfg: SurrogateConfig) -> float:
    """Seconds a replay of ``rate`` requests/s runs: ``replay_horizon_s``, stretched to hold
    at least ``replay_min_requests`` and at most ``replay_max_requests``."""
    if rate <= 0:
        return cfg.replay_horizon_s
    lo = cfg.replay_min_requests / rate
    hi = cfg.replay_max_requests / rate
    return min(max(cfg.replay_horizon_s, lo), hi)


def replay_open_loop(
    load: RankLoad,
    routing: Routing,
    replicas: int,
    rate_rps: float,
    cfg: SurrogateConfig,
    *,
    arrival: Arrival = Arrival.POISSON,
    gamma_cv: float = 1.0,
    horizon_s: float | None = None,
    step_cache: StepCache | None = None,
    sat: Saturation | None = None,
) -> ServingEstimate:
    """Replay ``rate_rps`` over ``replicas`` replicas for a horizon; per-replica estimate.

    ``step_cache`` (over ``load``'s step model, with the engine's default resolution) lets
    replays of one step model share their step-time cache; without it each engine builds its
    own, with the same values.  ``sat`` is ``saturation(load)`` when the caller has it.
    """
    n = replicas
    horizon = horizon_s if horizon_s is not None else replay_horizon(rate_rps, cfg)
    analytic = estimate_open_loop(load, rate_rps / n, horizon, sat=sat)
    mod = _engine()
    if mod is None or rate_rps <= 0:
        return analytic
    workload = WorkloadProfile(
        input_len=load.input_len,
        output_len=load.output_len,
        arrival=arrival,
        rate_rps=rate_rps,
        gamma_cv=gamma_cv,
    )
    rng = np.random.default_rng(cfg.seed)
    warm = 0.2 * horizon
    engine = mod.ReplayEngine(_specs(mod, load, n, step_cache), routing)
    engine.submit(mod.sample_requests(workload, rng, 0.0, warm + horizon))
    engine.advance(warm)
    stats = engine.advance(warm + horizon)
    # Below saturation the served rate is the offered rate; use its exact expectation rather
    # than the sampled window's (which carries Poisson noise).  Near or above saturation the
    # replay decides.
    expected = analytic.throughput_tok_s if analytic.utilization < 0.9 else None
    return _estimate(stats, analytic, n, expected_tok_s=expected)


def replay_closed_loop(
    load: RankLoad,
    routing: Routing,
    replicas: int,
    concurrency: int,
    cfg: SurrogateConfig,
    *,
    horizon_s: float | None = None,
    step_cache: StepCache | None = None,
    sat: Saturation | None = None,
) -> ServingEstimate:
    """Keep ``concurrency`` requests in flight over ``replicas`` replicas; per-replica estimate
    (``step_cache`` and ``sat`` as in :func:`replay_open_loop`)."""
    n = replicas
    analytic = estimate_closed_loop(load, concurrency / n, sat=sat)
    mod = _engine()
    if mod is None or not hasattr(mod, "run_closed_loop"):
        return analytic
    rate = analytic.throughput_tok_s * n / max(load.output_len.mean, 1.0)
    horizon = horizon_s if horizon_s is not None else replay_horizon(rate, cfg)
    count = min(max(math.ceil(rate * horizon * 1.5) + concurrency, concurrency), 100_000)
    workload = WorkloadProfile(
        input_len=load.input_len, output_len=load.output_len, total_requests=1
    )
    rng = np.random.default_rng(cfg.seed)
    requests = mod.batch_requests(workload, rng, count)
    specs = _specs(mod, load, n, step_cache)
    stats = mod.run_closed_loop(specs, routing, requests, concurrency, horizon)
    return _estimate(stats, analytic, n)


@attrs.frozen
class ProtocolRun:
    """A protocol's run through the replay: the per-replica estimate and the run's means."""

    estimate: ServingEstimate
    mean_ttft_ms: float
    mean_tpot_ms: float


def _burst_requests(
    mod: Any, protocol: LoadProtocol, load: RankLoad, rng: np.random.Generator
) -> list[Any]:
    n = protocol.requests
    inputs = protocol.lengths(round(load.input_len.mean), rng, n)
    outputs = protocol.lengths(round(load.output_len.mean), rng, n)
    return [
        mod.Request(i, 0.0, int(x), int(y))
        for i, (x, y) in enumerate(zip(inputs.tolist(), outputs.tolist(), strict=True))
    ]


def _overloaded_open_loop(
    load: RankLoad, routing: Routing, replicas: int, rate: float, cfg: SurrogateConfig
) -> ServingEstimate:
    """Replay an open loop at ``rate`` requests/s; past saturation, its backlog in closed form.

    A replay holds at most ``replay_max_requests`` arrivals, so far past saturation its window
    (``replay_max_requests / rate``) shrank below one engine step: nothing finished in it and
    no queue had time to age, and the prediction improved as the rate rose (1e8 req/s: 0 tok/s,
    p99 TTFT = the floor).  Past saturation more arrivals only lengthen the queue, so every
    overloaded rate is replayed at the saturation rate (throughput, batch and TPOT at
    capacity, the same for all of them) and, as the planner does (:func:`backlog_over`), the
    queue the excess grows is added in closed form over the horizon the prediction states:
    ``replay_horizon_s`` stretched to hold ``replay_min_requests`` served requests, fixed past
    saturation, so the p99 TTFT grows with the rate (docs/surrogate.md, "Replay").
    """
    sat = saturation(load)
    out = max(load.output_len.mean, 1.0)
    capacity = sat[1] * replicas / out  # requests/s the replicas complete at saturation
    if rate <= capacity or capacity <= 0:
        return replay_open_loop(load, routing, replicas, rate, cfg, sat=sat)
    est = replay_open_loop(load, routing, replicas, capacity, cfg, sat=sat)
    # The replay at the saturation rate grew no backlog (ran 0 s at ``rate``'s excess).
    return backlog_over(est, rate / replicas * out, 0.0, overload_horizon(capacity, cfg))


def overload_horizon(capacity_rps: float, cfg: SurrogateConfig) -> float:
    """The horizon a prediction past saturation ages its queue over: ``replay_horizon_s``
    stretched to hold ``replay_min_requests`` served requests (``capacity_rps`` of them a
    second), the same for every overloaded rate."""
    return max(cfg.replay_horizon_s, cfg.replay_min_requests / capacity_rps)


def replay_protocol(
    load: RankLoad,
    routing: Routing,
    replicas: int,
    protocol: LoadProtocol,
    cfg: SurrogateConfig,
    *,
    floor_ms: float = 0.0,
) -> ProtocolRun:
    """Run ``protocol`` over ``replicas`` replicas the way the benchmark runs it.

    A burst protocol issues ``concurrency`` requests at ``t = 0`` and keeps that many in flight
    until its ``request_count`` requests are done; every statistic covers the whole run.  A
    steady-state protocol is measured after a warm-up; an open-loop one over a horizon.
    ``floor_ms`` (the engine's per-request frontend and scheduling latency) is added to every
    TTFT; in a closed loop it also lengthens each client's cycle, which lowers throughput.
    """
    if protocol.rate_rps is not None:
        est = _overloaded_open_loop(load, routing, replicas, protocol.rate_rps, cfg)
        est = attrs.evolve(
            est,
            p50_ttft_ms=est.p50_ttft_ms + floor_ms,
            p99_ttft_ms=est.p99_ttft_ms + floor_ms,
        )
        return ProtocolRun(est, est.p50_ttft_ms, est.p50_tpot_ms)
    conc = protocol.concurrency
    assert conc is not None
    n = replicas
    analytic = estimate_closed_loop(load, conc / n)
    mod = _engine()
    if mod is None:
        return ProtocolRun(analytic, analytic.p50_ttft_ms + floor_ms, analytic.p50_tpot_ms)
    rng = np.random.default_rng(cfg.seed)
    specs = _specs(mod, load, n)
    rate = analytic.throughput_tok_s * n / max(load.output_len.mean, 1.0)
    if protocol.burst:
        requests = _burst_requests(mod, protocol, load, rng)
        # Long enough for the whole run at the screen's rate, with room for a slower replay.
        horizon = 4.0 * len(requests) / max(rate, 1e-9) + 60.0
        stats = mod.run_closed_loop(specs, routing, requests, conc, horizon)
    else:
        horizon = replay_horizon(rate, cfg)
        count = min(math.ceil(rate * horizon * 1.7) + conc, 100_000)
        requests = _burst_requests(
            mod, attrs.evolve(protocol, burst=True, request_count=count), load, rng
        )
        stats = mod.run_closed_loop(specs, routing, requests, conc, horizon, warmup_s=0.3 * horizon)
    est = _estimate(stats, analytic, n)
    ttft = np.asarray(stats.ttft_ms, dtype=float) + floor_ms
    censored = np.concatenate([ttft, np.asarray(stats.unserved_age_ms, dtype=float) + floor_ms])
    tpot = np.asarray(stats.tpot_ms, dtype=float)
    finish = np.asarray(stats.finish_s, dtype=float)
    tokens = float(np.sum(np.asarray(stats.output_tokens, dtype=float)))
    if protocol.burst and finish.size:
        # Benchmark throughput: output tokens over the run's span; every client's cycle is
        # one floor longer per request it sends.
        span = float(finish.max()) + floor_ms / 1e3 * len(requests) / conc
        tput = tokens / span / n if span > 0 else est.throughput_tok_s
    else:
        e2e = float(np.mean(finish - np.asarray(stats.arrival_s))) if finish.size else 0.0
        slow = e2e / (e2e + floor_ms / 1e3) if e2e > 0 else 1.0
        tput = est.throughput_tok_s * slow
    est = attrs.evolve(
        est,
        p50_ttft_ms=float(np.percentile(censored, 50)) if censored.size else est.p50_ttft_ms,
        p99_ttft_ms=float(np.percentile(censored, 99)) if censored.size else est.p99_ttft_ms,
        throughput_tok_s=tput,
    )
    mean_ttft = float(np.mean(censored)) if censored.size else est.p50_ttft_ms
    mean_tpot = float(np.mean(tpot)) if tpot.size else est.p50_tpot_ms
    return ProtocolRun(est, mean_ttft, mean_tpot)
