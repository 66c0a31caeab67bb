"""Validate a :class:`SelectionProblem` and compile it to arrays shared by greedy and the MILP."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Hashable

import attrs
import numpy as np
import numpy.typing as npt

from koi.errors import InvalidInput
from koi.selector._model import Candidate, SelectionProblem, SelectorConfig
from koi.types import ActionKind

__all__ = ["Compiled", "compile_problem"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Kinds that take new capacity and therefore fall under the priority rule (C5).
_TAKES = (ActionKind.PLACE, ActionKind.RECONFIGURE)


@attrs.frozen
class Compiled:
    """A problem as arrays. Candidates are renumbered job by job (``job_start``).

    ``use_pools[k]`` / ``use_amount[k]`` give candidate ``k``'s capacity use in this tick
    (transient under make-before-break), sparse; ``gpus`` its steady total (quota, C5);
    ``blocked_pools[k]`` the pools where candidate ``k`` takes new capacity (priority rule).
    ``protected`` lists, per (pool, priority level), the jobs whose deferral reserves that pool
    against lower priorities.  ``best_effort[k]`` marks a best-effort candidate; together they
    use at most ``free`` per pool (the GPUs no job holds now), each counting what it uses beyond
    what its own job holds (``free_pools[k]`` / ``free_amount[k]``: a running job served best
    effort grows into free GPUs, and its own are not free to anyone else), plus what the chosen
    room-freeing candidates give up (their ``free_amount`` is negative).
    """

    job_ids: tuple[str, ...]
    job_start: IntArray
    job_priority: IntArray
    cands: tuple[Candidate, ...]
    cand_job: IntArray
    value: FloatArray
    use_pools: tuple[IntArray, ...]
    use_amount: tuple[FloatArray, ...]
    gpus: FloatArray
    changes: BoolArray
    is_defer: BoolArray
    pool_ids: tuple[str, ...]
    capacity: FloatArray
    swap_budget: int | None
    group_of_job: IntArray  # -1 when the job has no capped group
    group_ids: tuple[str, ...]
    group_cap: FloatArray
    items: tuple[Hashable, ...]
    item_weight: FloatArray
    cover_items: tuple[tuple[int, ...], ...]
    blocked_pools: tuple[tuple[int, ...], ...]
    protected: dict[tuple[int, int], tuple[int, ...]]
    levels_by_pool: dict[int, tuple[int, ...]]
    pruned: int
    best_effort: BoolArray
    free: FloatArray
    free_pools: tuple[IntArray, ...]
    free_amount: tuple[FloatArray, ...]

    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    def job_slice(self, i: int) -> range:
        return range(int(self.job_start[i]), int(self.job_start[i + 1]))

    def protecting_level(self, pool: int, prio: int) -> int | None:
        """Smallest protected priority level above ``prio`` on ``pool`` (``None`` if none)."""
        levels = self.levels_by_pool.get(pool, ())
        at = bisect.bisect_right(levels, prio)
        return levels[at] if at < len(levels) else None


def _fail(msg: str) -> InvalidInput:
    return InvalidInput(msg)


def _check_counts(where: str, use: dict[str, int], pool_index: dict[str, int]) -> None:
    for pool, n in use.items():
        if pool not in pool_index:
            raise _fail(f"{where}: unknown pool {pool!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise _fail(f"{where}[{pool!r}]: must be an integer >= 0, got {n!r}")


def _validate(problem: SelectionProblem) -> dict[str, int]:
    pool_index: dict[str, int] = {}
    for p in problem.pools:
        if p.pool_id in pool_index:
            raise _fail(f"pools: duplicate pool_id {p.pool_id!r}")
        pool_index[p.pool_id] = len(pool_index)
    if not problem.candidates:
        raise _fail("candidates: need at least one candidate")
    seen: set[tuple[str, str]] = set()
    for c in problem.candidates:
        if (c.job_id, c.key) in seen:
            raise _fail(f"candidates: duplicate key {c.key!r} for job {c.job_id!r}")
        seen.add((c.job_id, c.key))
        _check_counts(
            f"candidates[{c.job_id}/{c.key}].gpus_by_pool", dict(c.gpus_by_pool), pool_index
        )
        if c.transient_gpus_by_pool is not None:
            _check_counts(
                f"candidates[{c.job_id}/{c.key}].transient_gpus_by_pool",
                dict(c.transient_gpus_by_pool),
                pool_index,
            )
    jobs = {c.job_id for c in problem.candidates}
    for name, mapping in (
        ("priority", problem.priority),
        ("quota_group", problem.quota_group),
        ("held_gpus", problem.held_gpus),
    ):
        for job in mapping:
            if job not in jobs:
                raise _fail(f"{name}: job {job!r} has no candidate")
    for job, prio in problem.priority.items():
        if isinstance(prio, bool) or not isinstance(prio, int) or prio < 0:
            raise _fail(f"priority[{job!r}]: must be an integer >= 0, got {prio!r}")
    for job, held in problem.held_gpus.items():
        _check_counts(f"held_gpus[{job!r}]", dict(held), pool_index)
    for group, cap in problem.quota_caps.items():
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            raise _fail(f"quota_caps[{group!r}]: must be an integer >= 0, got {cap!r}")
    for item, w in problem.exploration_weights.items():
        if not (isinstance(w, int | float) and math.isfinite(w) and w >= 0):
            raise _fail(f"exploration_weights[{item!r}]: must be a finite number >= 0, got {w!r}")
    b = problem.swap_budget
    if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 0):
        raise _fail(f"swap_budget: must be an integer >= 0 or None, got {b!r}")
    return pool_index


def _usage(
    c: Candidate,
    held: dict[str, int],
    cfg: SelectorConfig,
    pool_index: dict[str, int],
    row: FloatArray,
) -> None:
    if c.changes and cfg.make_before_break:
        if c.transient_gpus_by_pool is not None:
            peak = dict(c.transient_gpus_by_pool)
        else:
            peak = dict(held)
            for pool, n in c.gpus_by_pool.items():
                peak[pool] = peak.get(pool, 0) + n
    else:
        peak = dict(c.gpus_by_pool)
    for pool, n in peak.items():
        row[pool_index[pool]] = n


def _dominated(
    value: FloatArray,
    feats: FloatArray,
    covers: list[frozenset[Hashable]],
    fixed: BoolArray,
    can_dominate: BoolArray,
) -> BoolArray:
    """Candidates of one job beaten (or tied, later index) by another on every count.

    ``can_dominate`` is False for a deferral that reserves pools under the priority rule:
    deferring such a job has a side effect (it blocks lower-priority jobs) that the features
    do not capture, so it must not prune the job's placements.
    """
    k = len(value)
    le = np.all(feats[:, None, :] <= feats[None, :, :], axis=2)  # le[a, b]: a uses <= b
    ge_v = value[:, None] >= value[None, :]
    beats = le & ge_v & can_dominate[:, None]
    np.fill_diagonal(beats, val=False)
    out = np.zeros(k, dtype=bool)
    for b in np.flatnonzero(beats.any(axis=0) & ~fixed):
        for a in np.flatnonzero(beats[:, b]):
            if out[a] or not covers[b] <= covers[a]:
                continue
            exact_tie = value[a] == value[b] and np.array_equal(feats[a], feats[b])
            if exact_tie and covers[a] == covers[b] and a > b:
                continue  # keep the first of identical twins
            out[b] = True
            break
    return out


def _levels(protected: dict[tuple[int, int], list[int]]) -> dict[int, tuple[int, ...]]:
    by_pool: dict[int, set[int]] = defaultdict(set)
    for pool, level in protected:
        by_pool[pool].add(level)
    return {p: tuple(sorted(v)) for p, v in by_pool.items()}


def compile_problem(problem: SelectionProblem, cfg: SelectorConfig) -> Compiled:
    """Validate ``problem`` and lower it to arrays (dominated candidates pruned if configured)."""
    pool_index = _validate(problem)
    n_pool = len(pool_index)
    capacity = np.array([p.capacity_gpus for p in problem.pools], dtype=float)

    by_job: dict[str, list[Candidate]] = defaultdict(list)
    for c in problem.candidates:
        by_job[c.job_id].append(c)
    job_ids = tuple(by_job)
    prio_of = {j: problem.priority.get(j, 0) for j in job_ids}

    groups = sorted({g for g in problem.quota_caps if g in set(problem.quota_group.values())})
    caps = _group_caps(problem)
    group_index = {g: i for i, g in enumerate(groups)}

    # Per job: use rows, steady GPUs, and the pools where it takes new capacity.
    rows: dict[str, FloatArray] = {}
    takes: dict[str, list[tuple[int, ...]]] = {}
    for job in job_ids:
        held = dict(problem.held_gpus.get(job, {}))
        mat = np.zeros((len(by_job[job]), n_pool))
        tk: list[tuple[int, ...]] = []
        for r, c in enumerate(by_job[job]):
            _usage(c, held, cfg, pool_index, mat[r])
            if c.kind in _TAKES:
                tk.append(
                    tuple(
                        sorted(
                            pool_index[p] for p, n in c.gpus_by_pool.items() if n > held.get(p, 0)
                        )
                    )
                )
            else:
                tk.append(())
        rows[job] = mat
        takes[job] = tk

    # Priority rule: a job with a defer candidate and a feasible non-defer candidate reserves
    # the pools its feasible candidates take while it is deferred.
    protected: dict[tuple[int, int], list[int]] = defaultdict(list)
    reserving: set[str] = set()
    for i, job in enumerate(job_ids):
        cands = by_job[job]
        if not any(c.kind is ActionKind.DEFER for c in cands):
            continue
        group = problem.quota_group.get(job)
        gcap = caps.get(group, math.inf) if group is not None else math.inf
        needed: set[int] = set()
        for r, c in enumerate(cands):
            if c.kind is ActionKind.DEFER:
                continue
            if np.all(rows[job][r] <= capacity) and c.gpus <= gcap:
                needed.update(takes[job][r])
        for p in needed:
            protected[(p, prio_of[job])].append(i)
        if needed:
            reserving.add(job)

    # Dominance pruning inside each job (exact: never removes a unique optimum).
    kept: list[Candidate] = []
    kept_rows: list[FloatArray] = []
    kept_takes: list[tuple[int, ...]] = []
    job_start = [0]
    pruned = 0
    for job in job_ids:
        cands = by_job[job]
        mat = rows[job]
        drop = np.zeros(len(cands), dtype=bool)
        if cfg.prune_dominated and len(cands) > 1:
            cols = np.flatnonzero(mat.any(axis=0))
            take_cols = sorted({p for t in takes[job] for p in t})
            take_mat = np.zeros((len(cands), len(take_cols)))
            tpos = {p: j for j, p in enumerate(take_cols)}
            for r, t in enumerate(takes[job]):
                for p in t:
                    take_mat[r, tpos[p]] = 1.0
            feats = np.column_stack(
                [
                    mat[:, cols],
                    take_mat,
                    [c.gpus for c in cands],
                    [float(c.changes) for c in cands],
                    # A best-effort candidate is more constrained: it never prunes another;
                    # and only a room-freeing candidate prunes a room-freeing one.
                    [float(c.best_effort) for c in cands],
                    [float(not c.frees_room) for c in cands],
                ]
            )
            fixed = np.array([c.kind in (ActionKind.DEFER, ActionKind.KEEP) for c in cands])
            can_dominate = np.array(
                [not (job in reserving and c.kind is ActionKind.DEFER) for c in cands]
            )
            drop = _dominated(
                np.array([c.value for c in cands]),
                feats,
                [c.covers for c in cands],
                fixed,
                can_dominate,
            )
        for r, c in enumerate(cands):
            if drop[r]:
                pruned += 1
                continue
            kept.append(c)
            kept_rows.append(mat[r])
            kept_takes.append(takes[job][r])
        job_start.append(len(kept))

    # Items in a canonical order, not the mapping's, and each candidate's in index order: the
    # same problem must give the same MILP, and both orders can follow the iteration of sets of
    # strings, which differs between interpreters (hash randomization).  A MILP whose columns
    # come in another order may stop at another plan within its gap.
    items = tuple(sorted((w for w, v in problem.exploration_weights.items() if v > 0), key=repr))
    item_index = {e: i for i, e in enumerate(items)}
    cover_items = tuple(
        tuple(sorted(item_index[e] for e in c.covers if e in item_index)) for c in kept
    )
    job_pos = {j: i for i, j in enumerate(job_ids)}
    beyond = [_beyond_held(c, r, problem, pool_index) for c, r in zip(kept, kept_rows, strict=True)]
    return Compiled(
        job_ids=job_ids,
        job_start=np.array(job_start, dtype=np.int64),
        job_priority=np.array([prio_of[j] for j in job_ids], dtype=np.int64),
        cands=tuple(kept),
        cand_job=np.array([job_pos[c.job_id] for c in kept], dtype=np.int64),
        value=np.array([c.value for c in kept], dtype=float),
        use_pools=tuple(np.flatnonzero(r) for r in kept_rows),
        use_amount=tuple(r[r > 0] for r in kept_rows),
        gpus=np.array([c.gpus for c in kept], dtype=float),
        changes=np.array([c.changes for c in kept], dtype=bool),
        is_defer=np.array([c.kind is ActionKind.DEFER for c in kept], dtype=bool),
        pool_ids=tuple(pool_index),
        capacity=capacity,
        swap_budget=problem.swap_budget,
        group_of_job=np.array(
            [group_index.get(problem.quota_group.get(j, ""), -1) for j in job_ids],
            dtype=np.int64,
        ),
        group_ids=tuple(groups),
        group_cap=np.array([caps[g] for g in groups], dtype=float),
        items=items,
        item_weight=np.array([problem.exploration_weights[e] for e in items], dtype=float),
        cover_items=cover_items,
        blocked_pools=tuple(kept_takes),
        protected={k: tuple(v) for k, v in protected.items()},
        levels_by_pool=_levels(protected),
        pruned=pruned,
        best_effort=np.array([c.best_effort for c in kept], dtype=bool),
        free=_free(problem, capacity, pool_index),
        free_pools=tuple(np.flatnonzero(r) for r in beyond),
        free_amount=tuple(r[r != 0] for r in beyond),
    )


def _beyond_held(
    c: Candidate, row: FloatArray, problem: SelectionProblem, pool_index: dict[str, int]
) -> FloatArray:
    """What candidate ``c`` takes from the GPUs free to best effort, per pool: a best-effort
    candidate its use beyond what its job holds; a room-freeing one minus what it gives up of
    what its job holds; any other candidate nothing."""
    if not (c.best_effort or c.frees_room):
        return np.zeros_like(row)
    out = row.copy()
    for pool, n in problem.held_gpus.get(c.job_id, {}).items():
        out[pool_index[pool]] -= n
    beyond: FloatArray = np.maximum(out, 0.0) if c.best_effort else np.minimum(out, 0.0)
    return beyond


def _free(
    problem: SelectionProblem, capacity: FloatArray, pool_index: dict[str, int]
) -> FloatArray:
    """GPUs per pool that no job holds now: all that best-effort candidates may share."""
    free = capacity.copy()
    for held in problem.held_gpus.values():
        for pool, n in held.items():
            free[pool_index[pool]] -= n
    out: FloatArray = np.maximum(free, 0.0)
    return out


def _group_caps(problem: SelectionProblem) -> dict[str, float]:
    """C5 cap per quota group: its quota, or what its jobs already hold if that is more.

    Keeping an existing ladder is never blocked: a quota lowered below current use shrinks the
    group as its jobs change or end, not by forced stops (which C4 might not even allow).
    """
    held: dict[str, int] = defaultdict(int)
    for job, group in problem.quota_group.items():
        held[group] += sum(problem.held_gpus.get(job, {}).values())
    return {g: float(max(cap, held[g])) for g, cap in problem.quota_caps.items()}
