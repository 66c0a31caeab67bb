"""S4 with its S5 loop: budget books, then rounds of proposals, each evaluated.

Every proposer (the built-in generator through its plugin, an LLM, the host's own) gets a typed
:class:`koi.candidates.ProposalContext` per job and round; what they return is evaluated (S5)
and fed back.  A job comes back for another round only when no candidate beats keeping or
deferring it (paper §2.1); later rounds give the built-in generator more headroom.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import attrs

from koi.beliefs import Beta, EdgeKey, EvidenceStore
from koi.candidates import Corrections, ProposalContext, Screener, at_risk_outcomes
from koi.config import KoiConfig
from koi.dag import CausalDag, DagView, Mechanism, RankContext
from koi.errors import KoiError
from koi.planner._books import job_demand
from koi.planner._deadline import TickDeadline
from koi.planner._evaluate import Evaluated, Evaluator
from koi.plugins import PluginHost
from koi.selector import BudgetBook, BudgetBooks, pool_capacities
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    GpuSpec,
    Job,
    Ladder,
    ModelSpec,
    Outcome,
    Rank,
)

__all__ = ["Candidates", "budget_books", "dag_view", "job_mechanisms", "propose_and_evaluate"]

#: Per job: every ladder evaluated this tick (keep and defer included), in evaluation order.
Candidates = dict[str, dict[Ladder, Evaluated]]
# Scope fields a job fixes whatever ladder it gets.
_JOB_FIELDS = frozenset(
    {"model", "size_class", "is_moe", "params_b", "job_class", "input_len", "output_len"}
)
_FEEDBACK_LINES = 12


def budget_books(
    host: PluginHost,
    books: BudgetBooks,
    snapshot: ClusterSnapshot,
    jobs: Sequence[Job],
    *,
    screener: Callable[[Job], Screener],
    gpus: Mapping[str, GpuSpec],
    reference_costs: Mapping[str, float],
    cfg: KoiConfig,
    errors: list[str],
    deadline_s: float | None = None,
    corrections: Callable[[Job], Corrections] | None = None,
    held: Mapping[str, int] | None = None,
) -> Mapping[str, BudgetBook]:
    """The host's books when a plugin gives them (by ``deadline_s``), else the root planner's
    LP (paper §2.6), each job's demand sized on its ``screener`` with its ``corrections`` in
    force, over the pools' GPUs less those ``held`` by jobs left out of ``jobs`` (per pool)."""
    from_host = host.budget_books(snapshot, deadline_s=deadline_s)
    if from_host is not None:
        return from_host
    demands = []
    for job in jobs:
        d = job_demand(
            job,
            snapshot,
            screener(job),
            gpus,
            reference_cost_per_mtok=reference_costs[job.id],
            scoring=cfg.scoring,
            corrections=corrections(job) if corrections is not None else None,
        )
        if d is not None:
            demands.append(d)
    if not demands:
        return {}
    held = held or {}
    capacities = [
        attrs.evolve(c, capacity_gpus=max(c.capacity_gpus - held.get(c.pool_id, 0), 0))
        for c in pool_capacities(snapshot)
    ]
    try:
        return books.solve(demands, capacities)
    except KoiError as exc:
        errors.append(f"budget books: {exc}; proposing over every pool")
        return {}


def dag_view(dag: CausalDag, evidence: EvidenceStore, *, causal_graph: bool) -> DagView:
    """The graph as the proposers' backward query sees it: each edge with the fleet-pooled
    posterior of its beliefs (without the causal graph, the bare structure)."""
    if not causal_graph:
        return dag.view()
    support: dict[EdgeKey, float] = {}
    against: dict[EdgeKey, float] = {}
    for (edge, _), belief in evidence.items():
        support[edge] = support.get(edge, 0.0) + belief.alpha - 1.0
        against[edge] = against.get(edge, 0.0) + belief.beta - 1.0

    def pooled(edge: EdgeKey) -> Beta:
        return Beta(1.0 + support.get(edge, 0.0), 1.0 + against.get(edge, 0.0))

    return dag.view(
        confidence=lambda e: pooled(e).confidence,
        uncertainty=lambda e: pooled(e).uncertainty,
    )


def job_mechanisms(
    job: Job,
    mechanisms: Sequence[Mechanism],
    snapshot: ClusterSnapshot,
    *,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
) -> tuple[Mechanism, ...]:
    """Admitted mechanisms whose scope can match ``job`` (its model and workload fields; the
    hardware and config fields are the proposer's to match per candidate)."""
    spec = models.get(job.model)
    pool = next((p for p in snapshot.pools if p.environment.gpu in gpus), None)
    if not mechanisms or spec is None or pool is None:
        return ()
    env = pool.environment
    probe = RankContext.from_rank(
        Rank(Chain(job.model, env, Config()), 1), spec, gpus[env.gpu], job
    )
    return tuple(
        m
        for m in mechanisms
        if all(p.matches(probe) for p in m.scope.predicates if p.field in _JOB_FIELDS)
    )


def propose_and_evaluate(
    jobs: Sequence[Job],
    candidates: Candidates,
    *,
    host: PluginHost,
    evaluator: Evaluator,
    books: Mapping[str, BudgetBook],
    view: DagView,
    mechanisms: Mapping[str, tuple[Mechanism, ...]],
    evidence: EvidenceStore | None,
    cfg: KoiConfig,
    errors: list[str],
    deadline: TickDeadline | None = None,
    late: Collection[str] = (),
) -> Candidates:
    """The S4↔S5 rounds: ask every proposer for each job that has no improving candidate yet,
    evaluate what comes back, and feed the verdicts into the next round.  When the tick's
    ``deadline`` passes, the jobs not reached keep what they have (keep/defer).

    ``late`` batch jobs miss their deadline at their current rate: their throughput is at
    risk whatever the prediction says, and they are sized with the later rounds' headroom
    from the first round on."""
    deadline = deadline or TickDeadline()
    snapshot = evaluator.snapshot
    current = snapshot.current_ladders
    keeps = [
        (j, keep.outcomes)
        for j in jobs
        if j.id in current
        and (keep := candidates[j.id][current[j.id]].prediction) is not None
        and keep.feasible
    ]
    at_risk = {j.id: at_risk_outcomes(j, o, cfg.proposer.risk_margin) for j, o in keeps}
    breached = {j.id: at_risk_outcomes(j, o, 0.0) for j, o in keeps}
    for job_id in late:
        if Outcome.THROUGHPUT not in at_risk.get(job_id, ()):
            at_risk[job_id] = (*at_risk.get(job_id, ()), Outcome.THROUGHPUT)
    feedback: dict[str, tuple[str, ...]] = {}
    for rnd in range(cfg.planner.search_rounds):
        asked = [j for j in jobs if rnd == 0 or needs_another_round(candidates[j.id])]
        if not asked:
            break
        for job in asked:
            if deadline.passed:
                errors.append(f"tick deadline: proposals cut short in round {rnd}")
                break
            context = ProposalContext(
                snapshot=snapshot,
                gpus=evaluator.gpus,
                models=evaluator.models,
                deadline_s=deadline.proposals(cfg.planner.proposer_timeout_s),
                budget=books.get(job.id),
                dag=view,
                mechanisms=mechanisms[job.id],
                incumbent=current.get(job.id),
                feedback=feedback.get(job.id, ()),
                round=max(rnd, 1) if job.id in late and cfg.planner.search_rounds > 1 else rnd,
                max_candidates=cfg.planner.max_candidates,
                at_risk=at_risk.get(job.id, ()),
                breached=breached.get(job.id, ()),
                evidence=evidence,
                corrections=evaluator.corrections(job),
            )
            batch = host.propose_ladders(job, context)
            errors.extend(str(e) for e in batch.errors)
            mine = candidates[job.id]
            for ladder, sources in zip(batch.ladders, batch.sources, strict=True):
                if ladder not in mine:
                    key = f"r{rnd}c{len(mine)}"
                    mine[ladder] = evaluator.evaluate(job, ladder, key=key, sources=sources)
            feedback[job.id] = _feedback(mine.values())
    return candidates


def needs_another_round(candidates: Mapping[Ladder, Evaluated]) -> bool:
    """Invalid or non-improving: no candidate beats keeping/deferring (paper §2.1)."""
    baseline = max(
        (
            ev.report.value
            for ev in candidates.values()
            if ev.report.kind in (ActionKind.KEEP, ActionKind.DEFER, ActionKind.STOP)
        ),
        default=-math.inf,
    )
    return not any(
        ev.candidate is not None and ev.report.value > baseline
        for ev in candidates.values()
        if ev.report.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE)
    )


def _feedback(candidates: Iterable[Evaluated]) -> tuple[str, ...]:
    """Diagnostics for the proposers' next round: why candidates were rejected or lost."""
    out = []
    for ev in candidates:
        r = ev.report
        if r.rejected:
            out.append(f"{r.key}: rejected ({r.rejected})")
        elif r.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            out.append(f"{r.key}: value {r.value:.3f}, breach {r.breach_probability:.2f}")
    return tuple(out[:_FEEDBACK_LINES])
