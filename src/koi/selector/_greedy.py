"""Greedy selection (warm start and fallback), plan evaluation and binding-constraint report."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from koi.selector._compile import Compiled, IntArray
from koi.types import ActionKind

__all__ = ["binding_constraints", "greedy_choice", "plan_objective", "violations"]

_EPS = 1e-7


def _baseline(comp: Compiled, i: int) -> int | None:
    """The no-op choice: keep if the job has one, else defer, else nothing."""
    keep = defer = None
    for k in comp.job_slice(i):
        kind = comp.cands[k].kind
        if kind is ActionKind.KEEP and not comp.changes[k] and keep is None:
            keep = k
        elif kind is ActionKind.DEFER and defer is None:
            defer = k
    return keep if keep is not None else defer


def _protected_pools(comp: Compiled) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for (pool, _level), jobs in comp.protected.items():
        for j in jobs:
            out[j].append(pool)
    return out


def greedy_choice(comp: Compiled) -> IntArray | None:
    """One candidate index per job, or ``None`` if greedy finds no feasible plan.

    Start from keep/defer for every job, then visit jobs by priority (high first) and by how much
    their best candidate beats that baseline, and give each the candidate with the highest value
    plus not-yet-covered exploration weight that still fits C1, C4, C5 and the priority rule. A
    protected job left deferred blocks its pools for lower priorities, exactly like the MILP.
    """
    n = comp.n_jobs
    used = np.zeros(len(comp.pool_ids))
    be_used = np.zeros(len(comp.pool_ids))
    group_used = np.zeros(len(comp.group_ids))
    swaps = 0
    base: list[int | None] = [_baseline(comp, i) for i in range(n)]
    for i, b in enumerate(base):
        if b is not None:
            used[comp.use_pools[b]] += comp.use_amount[b]
            g = comp.group_of_job[i]
            if g >= 0:
                group_used[g] += comp.gpus[b]
            swaps += int(comp.changes[b])
    budget = comp.swap_budget if comp.swap_budget is not None else np.inf
    covered = np.zeros(len(comp.items), dtype=bool)
    block_level = np.full(len(comp.pool_ids), -1, dtype=np.int64)
    prot = _protected_pools(comp)

    def gain(i: int) -> float:
        ks = comp.job_slice(i)
        best = max(comp.value[k] for k in ks)
        b = base[i]
        return float(best - comp.value[b]) if b is not None else np.inf

    order = sorted(range(n), key=lambda i: (-int(comp.job_priority[i]), -gain(i)))
    choice = np.full(n, -1, dtype=np.int64)
    for i in order:
        prio = int(comp.job_priority[i])
        b = base[i]
        g = int(comp.group_of_job[i])
        scored = []
        for k in comp.job_slice(i):
            extra = sum(comp.item_weight[e] for e in comp.cover_items[k] if not covered[e])
            scored.append((comp.value[k] + extra, k))
        scored.sort(key=lambda t: -t[0])
        pick = None
        for _score, k in scored:
            if k == b:
                pick = k
                break
            if any(block_level[p] > prio for p in comp.blocked_pools[k]):
                continue
            trial = used.copy()
            if b is not None:
                trial[comp.use_pools[b]] -= comp.use_amount[b]
            trial[comp.use_pools[k]] += comp.use_amount[k]
            if np.any(trial[comp.use_pools[k]] > comp.capacity[comp.use_pools[k]] + _EPS):
                continue
            free_k = comp.free_pools[k]
            if comp.best_effort[k] and np.any(
                be_used[free_k] + comp.free_amount[k] > comp.free[free_k] + _EPS
            ):
                continue
            d_swap = int(comp.changes[k]) - (int(comp.changes[b]) if b is not None else 0)
            if swaps + d_swap > budget:
                continue
            if g >= 0:
                d_g = comp.gpus[k] - (comp.gpus[b] if b is not None else 0.0)
                if group_used[g] + d_g > comp.group_cap[g] + _EPS:
                    continue
                group_used[g] += d_g
            used = trial
            be_used[free_k] += comp.free_amount[k]  # empty unless best effort or freeing room
            swaps += d_swap
            pick = k
            break
        if pick is None:
            return None
        choice[i] = pick
        covered[list(comp.cover_items[pick])] = True
        if comp.is_defer[pick]:
            for p in prot.get(i, ()):
                block_level[p] = max(block_level[p], prio)
    if violations(comp, choice):
        return None
    return choice


def plan_objective(comp: Compiled, choice: IntArray) -> float:
    """``Σ value + Σ_e w_e·[e covered]`` of a choice."""
    covered: set[int] = set()
    for k in choice:
        covered.update(comp.cover_items[k])
    return float(comp.value[choice].sum() + sum(comp.item_weight[e] for e in covered))


def _usage(comp: Compiled, choice: IntArray) -> tuple[np.ndarray, np.ndarray, int]:
    used = np.zeros(len(comp.pool_ids))
    group_used = np.zeros(len(comp.group_ids))
    for i, k in enumerate(choice):
        used[comp.use_pools[k]] += comp.use_amount[k]
        g = comp.group_of_job[i]
        if g >= 0:
            group_used[g] += comp.gpus[k]
    return used, group_used, int(comp.changes[choice].sum())


def _best_effort_usage(comp: Compiled, choice: IntArray) -> np.ndarray:
    used = np.zeros(len(comp.pool_ids))
    for k in choice:  # only best-effort and room-freeing candidates have free pools
        used[comp.free_pools[k]] += comp.free_amount[k]
    return used


def _deferred_levels(comp: Compiled, choice: IntArray) -> dict[int, int]:
    """Highest priority level of a deferred protected job, per pool."""
    deferred = {i for i, k in enumerate(choice) if comp.is_defer[k]}
    out: dict[int, int] = {}
    for (pool, level), jobs in comp.protected.items():
        if any(j in deferred for j in jobs):
            out[pool] = max(out.get(pool, -1), level)
    return out


def violations(comp: Compiled, choice: IntArray) -> list[str]:
    """Names of the constraints ``choice`` breaks (empty when feasible)."""
    out: list[str] = []
    if len(choice) != comp.n_jobs or np.any(choice < 0):
        return ["one_per_job"]
    for i, k in enumerate(choice):
        if comp.cand_job[k] != i:
            return ["one_per_job"]
    used, group_used, swaps = _usage(comp, choice)
    out += [f"capacity[{comp.pool_ids[p]}]" for p in np.flatnonzero(used > comp.capacity + _EPS)]
    be_used = _best_effort_usage(comp, choice)
    out += [f"free[{comp.pool_ids[p]}]" for p in np.flatnonzero(be_used > comp.free + _EPS)]
    if comp.swap_budget is not None and swaps > comp.swap_budget:
        out.append("swap_budget")
    over = np.flatnonzero(group_used > comp.group_cap + _EPS)
    out += [f"quota[{comp.group_ids[g]}]" for g in over]
    levels = _deferred_levels(comp, choice)
    for i, k in enumerate(choice):
        prio = comp.job_priority[i]
        out += [
            f"priority[{comp.pool_ids[p]}]"
            for p in comp.blocked_pools[k]
            if levels.get(p, -1) > prio
        ]
    return out


def binding_constraints(comp: Compiled, choice: IntArray) -> tuple[str, ...]:
    """Constraints that are tight at ``choice`` and could constrain some candidate."""
    used, group_used, swaps = _usage(comp, choice)
    wanted = np.zeros(len(comp.pool_ids), dtype=bool)
    for pools in comp.use_pools:
        wanted[pools] = True
    out = [
        f"capacity[{comp.pool_ids[p]}]"
        for p in np.flatnonzero(wanted & (used >= comp.capacity - _EPS))
    ]
    be_used = _best_effort_usage(comp, choice)
    out += [
        f"free[{comp.pool_ids[p]}]"
        for p in np.flatnonzero((be_used > 0) & (be_used >= comp.free - _EPS))
    ]
    if comp.swap_budget is not None and comp.changes.any() and swaps >= comp.swap_budget:
        out.append("swap_budget")
    out += [
        f"quota[{comp.group_ids[g]}]" for g in np.flatnonzero(group_used >= comp.group_cap - _EPS)
    ]
    levels = _deferred_levels(comp, choice)
    blocked: set[int] = set()
    for k in range(len(comp.cands)):
        prio = comp.job_priority[comp.cand_job[k]]
        blocked.update(p for p in comp.blocked_pools[k] if levels.get(p, -1) > prio)
    out += [f"priority[{comp.pool_ids[p]}]" for p in sorted(blocked)]
    return tuple(out)
