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
    """``max c·z  s.t.  row_lo ≤ A z ≤ row_hi,  col_lo ≤ z ≤ col_hi``, ``integrality`` 1 = binary.

    Columns: the ``n_x`` candidate binaries first, then coverage ``y_e`` and the priority
    indicators ``r_{p,ℓ}`` (both continuous in [0, 1]: they are integral at any integral ``x``).
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


def formulate(comp: Compiled) -> MilpArrays:
    """Build the MILP of DESIGN §6 from a compiled problem."""
    n_x = len(comp.cands)
    cover_count = np.zeros(len(comp.items), dtype=np.int64)
    for cov in comp.cover_items:
        cover_count[list(cov)] += 1
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

    # Exactly one candidate per job.
    for i, job in enumerate(comp.job_ids):
        r = new_row(f"one[{job}]", 1.0, 1.0)
        ks = comp.job_slice(i)
        rows.extend([r] * len(ks))
        cols.extend(ks)
        vals.extend([1.0] * len(ks))

    # C1: capacity per pool (only pools some candidate uses).
    cand_idx = np.repeat(np.arange(n_x), [len(p) for p in comp.use_pools])
    pool_idx = np.concatenate(comp.use_pools) if n_x else np.zeros(0, dtype=np.int64)
    amount = np.concatenate(comp.use_amount) if n_x else np.zeros(0)
    used_pools = np.unique(pool_idx)
    pool_row = {}
    for p in used_pools:
        pool_row[int(p)] = new_row(f"capacity[{comp.pool_ids[p]}]", -np.inf, comp.capacity[p])
    rows.extend(pool_row[int(p)] for p in pool_idx)
    cols.extend(cand_idx.tolist())
    vals.extend(amount.tolist())

    # C4: swap budget.
    if comp.swap_budget is not None and comp.changes.any():
        r = new_row("swap_budget", -np.inf, float(comp.swap_budget))
        chg = [int(k) for k in np.flatnonzero(comp.changes)]
        rows.extend([r] * len(chg))
        cols.extend(chg)
        vals.extend([1.0] * len(chg))

    # C5: quota caps per group (steady-state GPUs).
    for g, group in enumerate(comp.group_ids):
        r = new_row(f"quota[{group}]", -np.inf, float(comp.group_cap[g]))
        for gi in np.flatnonzero(comp.group_of_job == g):
            for k in comp.job_slice(int(gi)):
                if comp.gpus[k] > 0:
                    rows.append(r)
                    cols.append(k)
                    vals.append(float(comp.gpus[k]))

    # Exploration coverage: y_e <= sum of x over candidates covering e.
    cover_row = {}
    for item in y_items:
        r = new_row(f"cover[{item}]", -np.inf, 0.0)
        cover_row[int(item)] = r
        rows.append(r)
        cols.append(y_col[int(item)])
        vals.append(1.0)
    for k, cov in enumerate(comp.cover_items):
        for e in cov:
            rows.append(cover_row[e])
            cols.append(k)
            vals.append(-1.0)

    # C5 priority rule: r_{p,l} >= x_defer(h) for protected h at level l on pool p;
    # r_{p,l} >= r_{p,l'} for l < l'; a lower candidate taking p: x_k + r_{p,next level} <= 1.
    for (p, level), jobs in comp.protected.items():
        rc = r_col[(p, level)]
        for h in jobs:
            r = new_row(f"reserve[{comp.pool_ids[p]},{level},{comp.job_ids[h]}]", -np.inf, 0.0)
            defers = [k for k in comp.job_slice(h) if comp.is_defer[k]]
            rows.extend([r] * (len(defers) + 1))
            cols.extend([*defers, rc])
            vals.extend([*([1.0] * len(defers)), -1.0])
    for p, levels in comp.levels_by_pool.items():
        for a, b in itertools.pairwise(levels):
            r = new_row(f"chain[{comp.pool_ids[p]},{a}]", -np.inf, 0.0)
            rows.extend([r, r])
            cols.extend([r_col[(p, b)], r_col[(p, a)]])
            vals.extend([1.0, -1.0])
    for k, pools in enumerate(comp.blocked_pools):
        prio = int(comp.job_priority[comp.cand_job[k]])
        for p in pools:
            above = comp.protecting_level(p, prio)
            if above is None:
                continue
            r = new_row(f"priority[{comp.pool_ids[p]}]", -np.inf, 1.0)
            rows.extend([r, r])
            cols.extend([k, r_col[(p, above)]])
            vals.extend([1.0, 1.0])

    c = np.zeros(n_col)
    c[:n_x] = comp.value
    c[n_x : n_x + len(y_items)] = comp.item_weight[y_items]
    integrality = np.zeros(n_col, dtype=np.int64)
    integrality[:n_x] = 1
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
        col_hi=np.ones(n_col),
        integrality=integrality,
        n_x=n_x,
        row_names=tuple(names),
    )
