"""The common evaluator (DESIGN §10.3): every metric from a run's trace.

Denominators are defined by the workload, never by what a policy chose to serve: offered
online requests (served or not), every online and batch job of the scenario, requested batch
tokens.  Refusing or dropping work therefore never raises quality, coverage or the goodput
share; it can lower the cost per SLO token (docs/evaluation.md says by how much that moves the
composite).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import numpy as np

from koi.sim._trace import Trace

__all__ = ["Metrics", "evaluate", "online_admission", "time_series"]


@attrs.frozen
class Metrics:
    """Every benchmark metric of one run (definitions in docs/evaluation.md)."""

    online_admission: float
    batch_admission: float
    batch_progress: float
    ttft_attainment: float
    tpot_attainment: float
    deadline_attainment: float
    goodput_tok_s: float
    offered_tok_s: float
    cost_usd: float
    slo_tokens: float
    cost_per_slo_token_usd: float
    reference_cost_per_token_usd: float
    quality: float
    coverage: float
    efficiency: float
    composite: float
    swaps: int
    keeps: int
    rejected_actions: int
    plan_time_median_s: float
    plan_time_p95_s: float
    dropped_requests: float


def _ratio(num: float, den: float, empty: float = 1.0) -> float:
    """``num / den`` clipped to [0, 1]; ``empty`` when nothing was asked (no such jobs)."""
    return empty if den <= 0 else min(1.0, max(0.0, num / den))


def online_admission(served: Mapping[str, float], offered: Mapping[str, float]) -> float:
    """Mean over online jobs of served / offered requests over the run (each clipped to 1).

    A job served for one window and refused afterwards is admitted for that window's share
    only.  Jobs that were offered nothing are left out; with none left, 1 (nothing was asked).
    """
    shares = [_ratio(served.get(j, 0.0), n) for j, n in sorted(offered.items()) if n > 0]
    return sum(shares) / len(shares) if shares else 1.0


def evaluate(trace: Trace) -> Metrics:
    r"""Compute the metrics of DESIGN §10.3 from ``trace``.

    .. math::

        Q = \tfrac13(A_{ttft} + A_{tpot} + A_{dl}),\quad
        C = \tfrac13(adm_{on} + adm_{batch} + progress),\quad
        E = \sqrt{\min(1, G / G_{off}) \cdot \min(1, c_{ref} / c_{slo})}

    and ``composite = 100 (Q C E)^{1/3}``, with ``G`` the SLO goodput (online tokens of requests
    meeting both bounds plus batch tokens of jobs that met their deadline, per second of the
    run), ``G_off`` the offered output-token rate, ``c_slo`` the whole provisioned fleet's cost
    per SLO token and ``c_ref`` the cheapest truth cost per token for the offered mix.
    Online requests still running at the end of the run (``trace.in_flight``) count in neither
    the admission nor the attainment rates.
    """
    online = set(trace.online_jobs)
    served: set[str] = set()
    # Per online job: requests offered and served over the run (online admission).
    job_offered: dict[str, float] = dict.fromkeys(online, 0.0)
    job_served: dict[str, float] = dict.fromkeys(online, 0.0)
    offered = offered_tok = ttft_ok = tpot_ok = slo_tok = dropped = cost = 0.0
    swaps = keeps = rejected = 0
    for tick in trace.ticks:
        cost += tick.cost_usd
        swaps += tick.swaps
        keeps += tick.keeps
        rejected += len(tick.rejected)
        for w in tick.jobs:
            if w.finished > 0 or w.batch_completed > 0:
                served.add(w.job_id)
            if w.job_id in online:
                job_offered[w.job_id] += w.offered
                job_served[w.job_id] += w.finished
                offered += w.offered
                offered_tok += w.offered_tokens
                ttft_ok += w.ttft_ok
                tpot_ok += w.tpot_ok
                slo_tok += w.slo_tokens
                dropped += w.dropped
    # Requests still running when the run ended are censored: neither served nor refused.
    for job_id, n in trace.in_flight.items():
        if job_id in online:
            job_offered[job_id] -= n
            offered -= n
    batch = trace.batch
    batch_tok = sum(b.output_tokens for b in batch if b.met_deadline)
    requested_tok = sum(b.requested_tokens for b in batch)
    progress_tok = sum(
        b.requested_tokens * min(1.0, b.completed_by_deadline / b.requested) for b in batch
    )
    slo_tokens = slo_tok + batch_tok
    duration = trace.duration_s
    goodput = slo_tokens / duration
    offered_rate = (offered_tok + requested_tok) / duration
    cost_per = cost / slo_tokens if slo_tokens > 0 else math.inf

    online_adm = online_admission(job_served, job_offered)
    batch_adm = _ratio(sum(b.job_id in served for b in batch), len(batch))
    progress = _ratio(progress_tok, requested_tok)
    a_ttft = _ratio(ttft_ok, offered)
    a_tpot = _ratio(tpot_ok, offered)
    a_dl = _ratio(sum(b.met_deadline for b in batch), len(batch))
    quality = (a_ttft + a_tpot + a_dl) / 3.0
    coverage = (online_adm + batch_adm + progress) / 3.0
    ref = trace.reference_cost_per_token_usd
    cost_term = 0.0 if cost_per == math.inf else 1.0 if cost_per <= ref else ref / cost_per
    efficiency = math.sqrt(_ratio(goodput, offered_rate, empty=0.0) * cost_term)
    composite = 100.0 * (quality * coverage * efficiency) ** (1.0 / 3.0)
    plan_times = np.array([t.plan_time_s for t in trace.ticks] or [0.0])
    return Metrics(
        online_admission=online_adm,
        batch_admission=batch_adm,
        batch_progress=progress,
        ttft_attainment=a_ttft,
        tpot_attainment=a_tpot,
        deadline_attainment=a_dl,
        goodput_tok_s=goodput,
        offered_tok_s=offered_rate,
        cost_usd=cost,
        slo_tokens=slo_tokens,
        cost_per_slo_token_usd=cost_per,
        reference_cost_per_token_usd=trace.reference_cost_per_token_usd,
        quality=quality,
        coverage=coverage,
        efficiency=efficiency,
        composite=composite,
        swaps=swaps,
        keeps=keeps,
        rejected_actions=rejected,
        plan_time_median_s=float(np.median(plan_times)),
        plan_time_p95_s=float(np.percentile(plan_times, 95)),
        dropped_requests=dropped,
    )


def time_series(trace: Trace) -> dict[str, tuple[float, ...]]:
    """Per-window series for plots: goodput, attainment, cost rate, swaps, plan time, and
    ``gpus:<type>`` allocation by GPU type.

    Window goodput counts online SLO tokens only (batch tokens count at the deadline verdict);
    window attainment is met over offered requests of the window, clipped to 1.
    """
    online = set(trace.online_jobs)
    types = sorted({g for t in trace.ticks for g in t.gpus_by_type})
    out: dict[str, list[float]] = {
        k: []
        for k in (
            "time_s",
            "goodput_tok_s",
            "ttft_attainment",
            "tpot_attainment",
            "cost_usd_per_h",
            "gpus",
            "swaps",
            "keeps",
            "plan_time_s",
        )
    }
    for g in types:
        out[f"gpus:{g}"] = []
    for t in trace.ticks:
        span = t.end_s - t.start_s
        ws = [w for w in t.jobs if w.job_id in online]
        offered = sum(w.offered for w in ws)
        out["time_s"].append(t.start_s)
        out["goodput_tok_s"].append(sum(w.slo_tokens for w in ws) / span)
        out["ttft_attainment"].append(_ratio(sum(w.ttft_ok for w in ws), offered))
        out["tpot_attainment"].append(_ratio(sum(w.tpot_ok for w in ws), offered))
        out["cost_usd_per_h"].append(t.cost_usd * 3600.0 / span)
        out["gpus"].append(float(sum(t.gpus_by_type.values())))
        out["swaps"].append(float(t.swaps))
        out["keeps"].append(float(t.keeps))
        out["plan_time_s"].append(t.plan_time_s)
        for g in types:
            out[f"gpus:{g}"].append(float(t.gpus_by_type.get(g, 0)))
    return {k: tuple(v) for k, v in out.items()}


def metrics_dict(metrics: Metrics) -> Mapping[str, float]:
    """Metrics as a flat JSON-ready mapping (infinity becomes ``None`` in JSON writers)."""
    return attrs.asdict(metrics)
