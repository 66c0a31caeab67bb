"""The selection in stages: C3's guarantee first, then best effort on what is left.

Stage one solves without the best-effort candidates (a stuck job's ladders past τ), so every
job that can be served within its target is planned as if the stuck jobs did not exist.  Then
the stuck online jobs take their best effort on the capacity left, and last the stuck batch
jobs on what the services left (docs/planner.md, "Best effort").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import attrs

from koi.selector import Selection, SelectionProblem, SelectorConfig, select
from koi.types import ActionKind

__all__ = ["select_best_effort_last"]


def select_best_effort_last(
    problem: SelectionProblem, cfg: SelectorConfig, *, online: Collection[str] = ()
) -> Selection:
    """The joint selection with C3's guarantee first and best effort on what is left.

    Stage one solves without the best-effort candidates, so every job that can be served
    within its target — pending batch jobs included — is planned as if the stuck jobs did not
    exist.  Stage two fixes that choice and lets the stuck ``online`` jobs that stayed deferred
    (or kept a running ladder) take their best-effort ladders on the capacity left (priorities
    were honoured in stage one; among stuck jobs the values decide); stage three does the same
    for the stuck batch jobs on what the second left: a service refused is an outage, a batch
    job behind its deadline is late work.  Without best-effort candidates it is one plain
    solve.
    """
    stuck = {c.job_id for c in problem.candidates if c.best_effort}
    selection = select(
        attrs.evolve(problem, candidates=[c for c in problem.candidates if not c.best_effort]),
        cfg=cfg,
    )
    services = stuck.intersection(online)
    for group in (services, stuck - services):
        if group:
            selection = _effort_stage(problem, selection.chosen, group, cfg)
    return selection


def _effort_stage(
    problem: SelectionProblem, chosen: Mapping[str, str], group: set[str], cfg: SelectorConfig
) -> Selection:
    """``chosen`` fixed, and the stuck jobs of ``group`` that it deferred or kept on their
    ladder free to take their best-effort candidates instead."""
    picked = [c for c in problem.candidates if c.key == chosen[c.job_id]]
    deferred = {c.job_id for c in picked if c.kind is ActionKind.DEFER}
    kept_running = {c.job_id for c in picked if c.kind is ActionKind.KEEP}
    reserved = _reserved(problem, deferred)
    waiting = (deferred | kept_running) & group
    kept = [
        c
        for c in problem.candidates
        if c.key == chosen[c.job_id]
        or (
            c.best_effort
            and c.job_id in waiting
            and not any(
                pool in reserved and problem.priority.get(c.job_id, 0) < reserved[pool]
                for pool in c.gpus_by_pool
            )
        )
    ]
    # The fixed jobs rank above every stuck one: a stuck job's deferral reserves nothing
    # against them (the stuck jobs keep their order among themselves).
    top = max(problem.priority.values(), default=0) + 1
    priority = {c.job_id: top for c in kept if c.job_id not in waiting}
    priority.update({j: problem.priority.get(j, 0) for j in waiting})
    return select(attrs.evolve(problem, candidates=kept, priority=priority), cfg=cfg)


def _reserved(problem: SelectionProblem, deferred: set[str]) -> dict[str, int]:
    """Per pool, the highest priority of a pending job that stage one deferred although one of
    its ladders within its target fits alone: the priority rule keeps lower priorities out of
    those pools, best effort included."""
    capacity = {p.pool_id: p.capacity_gpus for p in problem.pools}
    out: dict[str, int] = {}
    for c in problem.candidates:
        if c.best_effort or c.kind is not ActionKind.PLACE or c.job_id not in deferred:
            continue
        group = problem.quota_group.get(c.job_id)
        cap = problem.quota_caps.get(group, c.gpus) if group is not None else c.gpus
        if c.gpus <= cap and all(n <= capacity.get(p, 0) for p, n in c.gpus_by_pool.items()):
            level = problem.priority.get(c.job_id, 0)
            for pool in c.gpus_by_pool:
                out[pool] = max(out.get(pool, level), level)
    return out
