"""Telemetry: one :class:`~koi.types.Observation` per deployed rank and window, from its replay."""

from __future__ import annotations

import math

import numpy as np

from koi.sim._config import SimConfig
from koi.surrogate.replay import WindowStats
from koi.types import Chain, Job, Mediators, Observation, Outcome, Outcomes

__all__ = ["observe", "request_outcomes"]


def observe(
    job: Job,
    chain: Chain,
    st: WindowStats,
    weights: np.ndarray,
    *,
    window: tuple[float, float],
    routed: float,
    in_flight_change: float,
    replicas_up: int,
    replicas_expected: int,
    price_usd_per_h: float,
    memory_pressure: float,
    batch_left: tuple[float, float],
    cfg: SimConfig,
    tick_s: float,
    replica_tpot_ms: tuple[tuple[str, float], ...] = (),
) -> Observation:
    """The observation of one rank over ``window`` (world times).

    ``weights`` are the world requests each finished request of ``st`` stands for;
    ``batch_left`` is (requests left, requests the job finished in the window) for batch jobs;
    ``in_flight_change`` (world requests) is added to the completion count: the weights
    multiply the change in the rank's running requests by the window's scale, though the
    running set is a level (the caller passes ``(scale - 1) ×`` that change).
    p99 TTFT counts the ages of still-waiting requests as censored samples, so a backlog shows.
    A p99 with no sample in the window (no request finished: p99 TPOT; none arrived or
    waited: p99 TTFT) is reported missing, as a real source reports no data, and the SLO
    margin is taken over the latencies measured (missing too when neither was).
    """
    t0, t1 = window
    engine_span = st.duration_s if st.duration_s > 0 else 1.0
    tput = st.output_tokens_generated / engine_span
    cost = price_usd_per_h / 3600.0 / tput * 1e6 if tput > 0 else math.inf
    ttft = st.p99_ttft_with_unserved_ms()
    tpot = st.p99(st.tpot_ms)
    missing = [
        name
        for name, value in ((Outcome.TTFT.value, ttft), (Outcome.TPOT.value, tpot))
        if math.isnan(value)
    ]
    healthy = replicas_up >= replicas_expected and replicas_up > 0
    if job.is_online:
        t_b = job.target.p99_ttft_ms or math.inf
        p_b = job.target.p99_tpot_ms or math.inf
        gaps = [(b - y) / b for y, b in ((ttft, t_b), (tpot, p_b)) if not math.isnan(y)]
        if not gaps:
            missing.append(Outcome.SLO_MARGIN.value)
        margin = min(gaps, default=math.nan)
        healthy = healthy and (math.isnan(ttft) or ttft <= cfg.unhealthy_ttft_factor * t_b)
    else:
        remaining, done = batch_left
        deadline = job.target.deadline_s
        left = (t1 if deadline is None else deadline) - t1
        rate = done / max(t1 - t0, 1e-9)
        need = remaining / rate if rate > 0 else (0.0 if remaining <= 0 else math.inf)
        margin = (left - need) / max(abs(left), tick_s)
    if math.isnan(margin):
        margin = 0.0  # a placeholder: reported missing
    elif math.isfinite(margin):
        margin = min(1.0, max(cfg.slo_margin_floor, margin))
    else:
        margin = cfg.slo_margin_floor
    return Observation(
        job_id=job.id,
        chain=chain,
        start_s=t0,
        end_s=t1,
        requests=round(routed),
        completed=round(max(0.0, float(weights.sum()) + in_flight_change)),
        replicas_up=replicas_up,
        outcomes=Outcomes(
            cost_per_mtok_usd=cost,
            p99_ttft_ms=0.0 if math.isnan(ttft) else ttft,  # placeholders when missing
            p99_tpot_ms=0.0 if math.isnan(tpot) else tpot,
            throughput_tok_s=tput,
            slo_margin=margin,
        ),
        mediators=Mediators(
            kv_cache_util=min(1.0, st.kv_cache_util),
            mean_batch_size=st.mean_batch_size,
            queue_depth=st.queue_depth,
            mem_bw_util=st.mem_bw_util,
            compute_util=st.compute_util,
            comm_share=st.comm_share,
            bubble_fraction=st.bubble_fraction,
            preemption_rate=st.preemption_rate,
            prefill_share=min(1.0, st.prefill_share),
            memory_pressure=memory_pressure,
            prefix_hit_rate=st.prefix_hit_rate,
        ),
        healthy=healthy,
        missing=tuple(missing),
        replica_tpot_ms=replica_tpot_ms,
    )


def request_outcomes(
    job: Job, st: WindowStats, weights: np.ndarray
) -> tuple[float, float, float, float, float, float]:
    """(finished, output tokens, TTFT met, TPOT met, both met, tokens of both met), weighted.

    TTFT is first token minus arrival and TPOT ``(finish - first) / (output - 1)`` per request
    (0 for one-token outputs); batch jobs have no latency bounds (every request meets them).
    """
    out = st.output_tokens
    finished = float(weights.sum())
    tokens = float((weights * out).sum())
    if not job.is_online:
        return finished, tokens, finished, finished, finished, tokens
    ttft = (st.first_token_s - st.arrival_s) * 1e3
    tpot = np.where(out > 1, (st.finish_s - st.first_token_s) / np.maximum(out - 1, 1) * 1e3, 0.0)
    ok1 = ttft <= (job.target.p99_ttft_ms or math.inf)
    ok2 = tpot <= (job.target.p99_tpot_ms or math.inf)
    both = ok1 & ok2
    return (
        finished,
        tokens,
        float(weights[ok1].sum()),
        float(weights[ok2].sum()),
        float(weights[both].sum()),
        float((weights * out)[both].sum()),
    )
