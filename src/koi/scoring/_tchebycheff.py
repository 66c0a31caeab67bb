"""The augmented Tchebycheff score ``J_i`` (paper §2.2) and the score of a deferred job."""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from koi.errors import InvalidInput
from koi.scoring._config import ScoringConfig
from koi.types import Job, Outcome, Outcomes

__all__ = ["Normalizer", "deferral_score", "gaps", "ideal_point", "tchebycheff"]

_DEFAULT = ScoringConfig()
# Shortest time window used to turn a batch job's remaining work into a required rate, so a
# job at (or past) its deadline asks for a large but finite throughput.


def _check_positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise InvalidInput(f"{name}: must be a finite number > 0, got {value!r}")
    return float(value)


@attrs.frozen
class Normalizer:
    """Per-objective scales ``s_j`` of one job; build it with :meth:`for_job`.

    ``bound_*`` are the SLO bounds that add a violation term (``None`` when the objective is not
    constrained for this job).
    """

    cost_usd_per_mtok: float
    ttft_ms: float
    tpot_ms: float
    required_tok_s: float
    bound_ttft_ms: float | None
    bound_tpot_ms: float | None

    @classmethod
    def for_job(
        cls,
        job: Job,
        *,
        reference_cost_per_mtok: float,
        now_s: float | None = None,
        cfg: ScoringConfig = _DEFAULT,
    ) -> Normalizer:
        """Scales derived from the job's targets.

        * cost: ``reference_cost_per_mtok`` (e.g. the catalog's cheapest feasible chain);
        * TTFT / TPOT: the p99 bounds for an online job, ``cfg.batch_*_scale_ms`` for a batch job;
        * throughput: the required output rate — offered tokens/s for an online job, remaining
          output tokens over the time left to the deadline for a batch job.
        """
        ref = _check_positive("reference_cost_per_mtok", reference_cost_per_mtok)
        if job.is_online:
            ttft = job.target.p99_ttft_ms
            tpot = job.target.p99_tpot_ms
            assert ttft is not None
            assert tpot is not None
            required = job.workload.offered_output_tok_s
            return cls(ref, ttft, tpot, max(required, cfg.min_required_tok_s), ttft, tpot)
        required = job.required_output_tok_s(job.arrival_s if now_s is None else now_s)
        return cls(
            ref,
            cfg.batch_ttft_scale_ms,
            cfg.batch_tpot_scale_ms,
            max(required, cfg.min_required_tok_s),
            None,
            None,
        )

    def scale(self, outcome: Outcome) -> float:
        """``s_j`` for one objective (the SLO margin is already relative: scale 1)."""
        return {
            Outcome.COST: self.cost_usd_per_mtok,
            Outcome.TTFT: self.ttft_ms,
            Outcome.TPOT: self.tpot_ms,
            Outcome.THROUGHPUT: self.required_tok_s,
            Outcome.SLO_MARGIN: 1.0,
        }[outcome]


def ideal_point(job: Job, scales: Normalizer) -> dict[Outcome, float]:
    """Default reference point ``z*`` before any history exists.

    Free tokens, zero latency, the required throughput and a full SLO margin of 1. The
    calibration loop later moves ``z*`` toward the best outcomes the job achieved (paper §2.5).
    ``job`` is accepted so a caller can specialise by class; the default does not need it.
    """
    del job
    return {
        Outcome.COST: 0.0,
        Outcome.TTFT: 0.0,
        Outcome.TPOT: 0.0,
        Outcome.THROUGHPUT: scales.required_tok_s,
        Outcome.SLO_MARGIN: 1.0,
    }


def _ratio(value: float, cap: float) -> float:
    if math.isnan(value):
        raise InvalidInput(f"gap: got NaN ({value!r})")
    return min(max(value, 0.0), cap)


def gaps(
    job: Job,
    outcomes: Outcomes,
    z_star: Mapping[Outcome, float],
    scales: Normalizer,
    *,
    cfg: ScoringConfig = _DEFAULT,
) -> dict[Outcome, float]:
    r"""Normalized gaps ``g_ij`` between predicted outcomes and the reference point.

    .. math::

        g_j = \mathrm{clip}\Big(\frac{\pm(y_j - z^\star_j)}{s_j}, 0, r_{\max}\Big)
              + \kappa\,v_j

    with the sign chosen so that worse is larger, and ``v_j`` the relative violation of an
    SLO-constrained objective: ``(y - b)/b`` for an online latency over its bound ``b``,
    ``(R - y)/R`` for throughput under the required rate ``R``, ``-margin`` for a negative SLO
    margin (each floored at 0, capped at ``r_max``). ``κ = cfg.violation_slope``. The linear part
    keeps improving below the bound, so a cheaper ladder scores better even when every target is
    met; the violation part makes missing a target steep.
    """
    cap = cfg.max_ratio
    out: dict[Outcome, float] = {}
    for o in Outcome:
        y = outcomes.get(o)
        z = z_star[o]
        s = scales.scale(o)
        linear = (z - y) / s if o.maximized else (y - z) / s
        g = _ratio(linear, cap)
        if o is Outcome.TTFT and scales.bound_ttft_ms is not None:
            g += cfg.violation_slope * _ratio(y / scales.bound_ttft_ms - 1.0, cap)
        elif o is Outcome.TPOT and scales.bound_tpot_ms is not None:
            g += cfg.violation_slope * _ratio(y / scales.bound_tpot_ms - 1.0, cap)
        elif o is Outcome.THROUGHPUT:
            g += cfg.violation_slope * _ratio(1.0 - y / scales.required_tok_s, cap)
        elif o is Outcome.SLO_MARGIN:
            g += cfg.violation_slope * _ratio(-y, cap)
        out[o] = g
    return out


def _combine(job: Job, g: Mapping[Outcome, float], rho: float) -> float:
    weighted = [job.weights.of(o) * g[o] for o in Outcome]
    return -(max(weighted) + rho * sum(weighted))


def tchebycheff(
    job: Job,
    outcomes: Outcomes,
    *,
    z_star: Mapping[Outcome, float],
    scales: Normalizer,
    rho: float,
    cfg: ScoringConfig = _DEFAULT,
) -> float:
    r"""Augmented Tchebycheff score of one ladder (paper §2.2), higher is better, ``≤ 0``.

    .. math::

        J_i(L) = -\Big[\max_j w_{ij} g_{ij}(L) + \rho \sum_j w_{ij} g_{ij}(L)\Big]

    Examples
    --------
    >>> from koi.types import Job, LengthDist, Outcomes, ServingTarget, WorkloadProfile
    >>> w = WorkloadProfile(LengthDist(512), LengthDist(128), rate_rps=2.0)
    >>> job = Job("chat", "Llama-3.1-8B", "online", w, ServingTarget.online(
    ...     p99_ttft_ms=500, p99_tpot_ms=50))
    >>> s = Normalizer.for_job(job, reference_cost_per_mtok=1.0)
    >>> y = Outcomes(1.0, 250.0, 25.0, 300.0, 0.5)
    >>> round(tchebycheff(job, y, z_star=ideal_point(job, s), scales=s, rho=0.005), 4)
    -1.0125
    """
    if not (0 < rho <= 0.1):
        raise InvalidInput(f"rho: must be in (0, 0.1], got {rho!r}")
    return _combine(job, gaps(job, outcomes, z_star, scales, cfg=cfg), rho)


def deferral_score(
    job: Job, cfg: ScoringConfig = _DEFAULT, *, now_s: float | None = None, work_s: float = 0.0
) -> float:
    r"""Score ``J_i(∅)`` of the empty ladder: the worst gap on every objective.

    .. math::

        J_i(\varnothing) = -f_i\,G\,\Big[\max_j w_{ij} + \rho \sum_j w_{ij}\Big],
        \quad f_i = c_i\,(1 + \pi_i\,\mathrm{priority}_i)

    with ``G = cfg.deferral_gap`` and the class factor ``c_i`` = ``online_deferral_factor`` for an
    online job; for a batch job it rises linearly from ``batch_deferral_factor`` to the online
    factor as the slack to the deadline ``(deadline - now - work_s)`` shrinks from
    ``batch_urgency_horizon_s`` to 0 (a job past its deadline is as urgent as an online job).
    ``work_s`` is how long the remaining work takes at the best rate on offer (0: unknown), so
    a long job becomes urgent while it can still finish, not half an hour before its deadline.
    """
    if job.is_online:
        factor = cfg.online_deferral_factor
    else:
        now = job.arrival_s if now_s is None else now_s
        deadline = job.target.deadline_s
        assert deadline is not None
        slack = deadline - now - max(work_s, 0.0)
        urgency = 1.0 - min(max(slack / cfg.batch_urgency_horizon_s, 0.0), 1.0)
        lo, hi = cfg.batch_deferral_factor, cfg.online_deferral_factor
        factor = lo + (hi - lo) * urgency
    factor *= 1.0 + cfg.priority_step * job.priority
    g = dict.fromkeys(Outcome, cfg.deferral_gap * factor)
    return _combine(job, g, cfg.rho)
