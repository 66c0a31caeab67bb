"""The joint-selection MILP as plain arrays, shaped like ``scipy.optimize.milp``'s inputs."""

from __future__ import annotations

import itertools

import attrs
import numpy as np
import scipy.sparse as sp

from koi.selector._compile import Compiled, FloatArray, IntArray

__all__ = ["MilpArrays", "formulate"]


@attrs.frozen
class MilpArrays:
    """``max c·z  s.t.  row_lo ≤ A z ≤ row_hi,  col_lo ≤ z ≤ col_hi``, ``integrality`` 1 = integer.

    Columns: the ``n_x`` candidate columns first, then coverage ``y_e`` and the priority
    indicators ``r_{p,ℓ}`` (both continuous in [0, 1]: they are integral at any integral ``x``,
    except that ``r`` is declared integer when a merged class has a count above 1).  A class of
    identical jobs (``classes``, see :mod:`koi.selector._merge`) has one integer column per
    candidate of its first member, counting how many members take it; ``cand_col[k]`` is the
    column of candidate ``k`` (a later member's candidate shares its first member's column).
    """

    c: FloatArray
    A: sp.csc_matrix
    row_lo: FloatArray
    row_hi: FloatArray
    col_lo: FloatArray
    col_hi: FloatArray
    integrality: IntArray
    n_x: int
    row_names: tuple[str, ...]
    cand_col: IntArray = attrs.field(factory=lambda: np.zeros(0, dtype=np.int64))
    classes: tuple[tuple[int, ...], ...] = ()


def _columns(
    comp: Compiled, classes: tuple[tuple[int, ...], ...]
) -> tuple[IntArray, list[int], list[int]]:
    """Column of every candidate, and per class its first member and its size."""
    cand_col = np.zeros(len(comp.cands), dtype=np.int64)
    firsts, sizes = [], []
    n = 0
    for members in classes:
        first = members[0]
        for j in members:
            for k in comp.job_slice(j):
                cand_col[k] = n + k - int(comp.job_start[j])
        n += len(comp.job_slice(first))
        firsts.append(first)
        sizes.append(len(members))
    return cand_col, firsts, sizes


def formulate(comp: Compiled, classes: tuple[tuple[int, ...], ...] | None = None) -> MilpArrays:
    """Build the MILP of DESIGN §6 from a compiled problem.

    ``classes`` partitions the jobs into classes of identical jobs (default: every job alone);
    each class is one block of integer counts.
    """
    if classes is None:
        classes = tuple((i,) for i in range(comp.n_jobs))
    cand_col, firsts, sizes = _columns(comp, classes)
    size_of_job = np.zeros(comp.n_jobs, dtype=np.int64)
    for first, m in zip(firsts, sizes, strict=True):
        size_of_job[first] = m
    # Only a class's first member contributes its candidates (as counts); the others share them.
    rep = np.zeros(len(comp.cands), dtype=bool)
    for first in firsts:
        rep[list(comp.job_slice(first))] = True
    n_x = int(rep.sum())
    reps: list[int] = np.flatnonzero(rep).tolist()
    cover_count = np.zeros(len(comp.items), dtype=np.int64)
    for k in reps:
        cover_count[list(comp.cover_items[k])] += 1
    y_items = np.flatnonzero(cover_count > 0)
    y_col = {int(e): n_x + j for j, e in enumerate(y_items)}
    r_keys = sorted(comp.protected)
    r_col = {key: n_x + len(y_items) + j for j, key in enumerate(r_keys)}
    n_col = n_x + len(y_items) + len(r_keys)

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    names: list[str] = []

    def new_row(name: str, low: float, high: float) -> int:
        names.append(name)
        lo.append(low)
        hi.append(high)
        return len(names) - 1

    # Exactly one candidate per job: a class's counts sum to its size.
    for first, m in zip(firsts, sizes, strict=True):
        r = new_row(f"one[{comp.job_ids[first]}]", float(m), float(m))
        ks = [int(cand_col[k]) for k in comp.job_slice(first)]
        rows.extend([r] * len(ks))
        cols.extend(ks)
        vals.extend([1.0] * len(ks))

    # C1: capacity per pool (only pools some candidate uses).
    cand_idx = np.repeat(cand_col[reps], [len(comp.use_pools[k]) for k in reps])
    pool_idx = (
        np.concatenate([comp.use_pools[k] for k in reps]) if n_x else np.zeros(0, dtype=np.int64)
    )
    amount = np.concatenate([comp.use_amount[k] for k in reps]) if n_x else np.zeros(0)
    used_pools = np.unique(pool_idx)
    pool_row = {}
    for p in used_pools:
        pool_row[int(p)] = new_row(f"capacity[{comp.pool_ids[p]}]", -np.inf, comp.capacity[p])
    rows.extend(pool_row[int(p)] for p in pool_idx)
    cols.extend(cand_idx.tolist())
    vals.extend(amount.tolist())

    # C3's guarantee: best-effort candidates share only the GPUs nobody holds now, and those
    # the chosen room-freeing candidates give up (negative amounts).
    if comp.best_effort.any():
        be_pools: dict[int, int] = {}
        for kb in reps:
            if comp.best_effort[kb]:
                for pb in comp.free_pools[kb].tolist():
                    if pb not in be_pools:
                        be_pools[pb] = new_row(
                            f"free[{comp.pool_ids[pb]}]", -np.inf, float(comp.free[pb])
                        )
        for kb in reps:
            for pb, nb in zip(
                comp.free_pools[kb].tolist(), comp.free_amount[kb].tolist(), strict=True
            ):
                if pb in be_pools:
                    rows.append(be_pools[pb])
                    cols.append(int(cand_col[kb]))
                    vals.append(float(nb))

    # C4: swap budget.
    chg = [int(cand_col[k]) for k in reps if comp.changes[k]]
    if comp.swap_budget is not None and chg:
        r = new_row("swap_budget", -np.inf, float(comp.swap_budget))
        rows.extend([r] * len(chg))
        cols.extend(chg)
        vals.extend([1.0] * len(chg))

    # C5: quota caps per group (steady-state GPUs).
    for g, group in enumerate(comp.group_ids):
        r = new_row(f"quota[{group}]", -np.inf, float(comp.group_cap[g]))
        for first in firsts:
            if comp.group_of_job[first] != g:
                continue
            for k in comp.job_slice(first):
                if comp.gpus[k] > 0:
                    rows.append(r)
                    cols.append(int(cand_col[k]))
                    vals.append(float(comp.gpus[k]))

    # Exploration coverage: y_e <= sum of x over candidates covering e.
    cover_row = {}
    for item in y_items:
        r = new_row(f"cover[{item}]", -np.inf, 0.0)
        cover_row[int(item)] = r
        rows.append(r)
        cols.append(y_col[int(item)])
        vals.append(1.0)
    for k in reps:
        for e in comp.cover_items[k]:
            rows.append(cover_row[e])
            cols.append(int(cand_col[k]))
            vals.append(-1.0)

    # C5 priority rule: r_{p,l} >= x_defer(h) for protected h at level l on pool p;
    # r_{p,l} >= r_{p,l'} for l < l'; a lower candidate taking p: x_k + r_{p,next level} <= 1.
    # For a class of m jobs: m·r >= its deferred count, and a count n_k + m·r <= m.
    for (p, level), jobs in comp.protected.items():
        rc = r_col[(p, level)]
        for h in jobs:
            size = int(size_of_job[h])
            if size == 0:
                continue  # a later member of a class: its first member's row covers it
            r = new_row(f"reserve[{comp.pool_ids[p]},{level},{comp.job_ids[h]}]", -np.inf, 0.0)
            defers = [int(cand_col[k]) for k in comp.job_slice(h) if comp.is_defer[k]]
            rows.extend([r] * (len(defers) + 1))
            cols.extend([*defers, rc])
            vals.extend([*([1.0] * len(defers)), -float(size)])
    for p, levels in comp.levels_by_pool.items():
        for a, b in itertools.pairwise(levels):
            r = new_row(f"chain[{comp.pool_ids[p]},{a}]", -np.inf, 0.0)
            rows.extend([r, r])
            cols.extend([r_col[(p, b)], r_col[(p, a)]])
            vals.extend([1.0, -1.0])
    for k in reps:
        job = int(comp.cand_job[k])
        prio = int(comp.job_priority[job])
        count = float(size_of_job[job])
        for p in comp.blocked_pools[k]:
            above = comp.protecting_level(p, prio)
            if above is None:
                continue
            r = new_row(f"priority[{comp.pool_ids[p]}]", -np.inf, count)
            rows.extend([r, r])
            cols.extend([int(cand_col[k]), r_col[(p, above)]])
            vals.extend([1.0, count])

    c = np.zeros(n_col)
    c[cand_col[reps]] = comp.value[reps]
    c[n_x : n_x + len(y_items)] = comp.item_weight[y_items]
    integrality = np.zeros(n_col, dtype=np.int64)
    integrality[:n_x] = 1
    col_hi = np.ones(n_col)
    for first, m in zip(firsts, sizes, strict=True):
        col_hi[[int(cand_col[k]) for k in comp.job_slice(first)]] = float(m)
    if max(sizes, default=1) > 1:
        integrality[n_x + len(y_items) :] = 1  # r must be 0/1 when a count can exceed 1
    A = sp.csc_matrix(
        (np.asarray(vals, dtype=float), (np.asarray(rows), np.asarray(cols))),
        shape=(len(names), n_col),
    )
    return MilpArrays(
        c=c,
        A=A,
        row_lo=np.asarray(lo, dtype=float),
        row_hi=np.asarray(hi, dtype=float),
        col_lo=np.zeros(n_col),
        col_hi=col_hi,
        integrality=integrality,
        n_x=n_x,
        row_names=tuple(names),
        cand_col=cand_col,
        classes=classes,
    )
