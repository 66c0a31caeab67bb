"""The public joint selector: ``select`` (HiGHS MILP) and ``greedy``."""

from __future__ import annotations

import math
import time

import attrs
import numpy as np

from koi.errors import InfeasibleError, InvalidInput, SolverError, SolverLimitError
from koi.selector._compile import Compiled, IntArray, compile_problem
from koi.selector._formulate import MilpArrays, formulate
from koi.selector._greedy import binding_constraints, greedy_choice, plan_objective, violations
from koi.selector._highs import solve_milp
from koi.selector._merge import job_classes
from koi.selector._model import Selection, SelectionProblem, SelectionStatus, SelectorConfig

__all__ = ["greedy", "select"]

_DEFAULT = SelectorConfig()
_INTEGRAL_TOL = 1e-6
_MIN_SOLVE_S = 0.05
# The LP-fixed sub-MILP is solved to a quarter of the gap: its plan must leave the full MILP
# room to prove the overall gap from the LP bound without another solve.
_LP_FIX_GAP_SHARE = 0.25


def _select_iv(
    problem: SelectionProblem,
    time_limit_s: float | None,
    mip_rel_gap: float | None,
    cfg: SelectorConfig,
) -> tuple[Compiled, SelectorConfig]:
    if not isinstance(problem, SelectionProblem):
        raise InvalidInput(f"problem: must be a SelectionProblem, got {type(problem).__name__}")
    if not isinstance(cfg, SelectorConfig):
        raise InvalidInput(f"cfg: must be a SelectorConfig, got {type(cfg).__name__}")
    if time_limit_s is not None:
        if not (isinstance(time_limit_s, int | float) and time_limit_s > 0):
            raise InvalidInput(f"time_limit_s: must be > 0, got {time_limit_s!r}")
        cfg = attrs.evolve(cfg, time_limit_s=float(time_limit_s))
    if mip_rel_gap is not None:
        if not (isinstance(mip_rel_gap, int | float) and 0 <= mip_rel_gap < 1):
            raise InvalidInput(f"mip_rel_gap: must be in [0, 1), got {mip_rel_gap!r}")
        cfg = attrs.evolve(cfg, mip_rel_gap=float(mip_rel_gap))
    return compile_problem(problem, cfg), cfg


def _time_left(cfg: SelectorConfig, t0: float, share: float = 1.0) -> float:
    """HiGHS' time limit for the next solve: a share of what is left of the selector's limit
    (at least a sliver, so a late solve still returns its incumbent); no limit without one."""
    if cfg.time_limit_s is None:
        return math.inf
    return max((cfg.time_limit_s - (time.perf_counter() - t0)) * share, _MIN_SOLVE_S)


def _gap(objective: float, bound: float) -> float:
    if not math.isfinite(bound):
        return math.inf
    return max(bound - objective, 0.0) / max(abs(objective), 1.0)


def _result(
    comp: Compiled,
    choice: IntArray,
    status: SelectionStatus,
    *,
    bound: float,
    t0: float,
    greedy_objective: float,
    message: str = "",
) -> Selection:
    objective = plan_objective(comp, choice)
    return Selection(
        status=status,
        chosen={comp.job_ids[i]: comp.cands[k].key for i, k in enumerate(choice)},
        objective=objective,
        bound=max(bound, objective),
        gap=_gap(objective, bound),
        solve_time_s=time.perf_counter() - t0,
        binding=binding_constraints(comp, choice),
        greedy_objective=greedy_objective,
        pruned=comp.pruned,
        message=message,
    )


def _as_choice(comp: Compiled, milp: MilpArrays, x: np.ndarray) -> IntArray:
    """Per job, the chosen candidate; a class's counts go to its members in job order."""
    choice = np.zeros(comp.n_jobs, dtype=np.int64)
    for members in milp.classes:
        first = members[0]
        ks = list(comp.job_slice(first))
        counts = np.rint(x[milp.cand_col[ks]]).astype(np.int64).clip(min=0)
        if counts.sum() != len(members):  # not integral enough to decode: the largest first
            counts = np.zeros(len(ks), dtype=np.int64)
            counts[int(np.argmax(x[milp.cand_col[ks]]))] = len(members)
        offsets = np.repeat(np.arange(len(ks)), counts)
        for j, off in zip(members, offsets, strict=True):
            choice[j] = int(comp.job_start[j]) + int(off)
    return choice


def _start_vector(comp: Compiled, milp: MilpArrays, choice: IntArray) -> np.ndarray:
    """The MILP columns of a per-job choice (counts for merged classes; y and r filled in)."""
    start = np.zeros(len(milp.c))
    np.add.at(start, milp.cand_col[choice], 1.0)
    covered = {e for k in choice for e in comp.cover_items[k]}
    y_items = sorted({e for k in range(len(comp.cands)) for e in comp.cover_items[k]})
    for j, e in enumerate(y_items):
        start[milp.n_x + j] = float(e in covered)
    # r_{p,l} columns start at their minimal feasible values.
    return _fill_reserve(comp, choice, start, milp.n_x + len(y_items))


def greedy(problem: SelectionProblem, *, cfg: SelectorConfig = _DEFAULT) -> Selection:
    """The greedy plan alone (the selector's warm start and fallback); see :func:`select`.

    Raises
    ------
    InfeasibleError
        If greedy finds no plan satisfying C1, C4 and C5.
    """
    t0 = time.perf_counter()
    comp = compile_problem(problem, cfg)
    choice = greedy_choice(comp)
    if choice is None:
        raise InfeasibleError("greedy: no plan satisfies C1, C4 and C5")
    obj = plan_objective(comp, choice)
    return _result(
        comp, choice, SelectionStatus.GREEDY_FALLBACK, bound=math.inf, t0=t0, greedy_objective=obj
    )


def select(
    problem: SelectionProblem,
    *,
    time_limit_s: float | None = None,
    mip_rel_gap: float | None = None,
    warm_start: bool = True,
    cfg: SelectorConfig = _DEFAULT,
) -> Selection:
    r"""Choose one candidate per job maximising the plan score under C1, C4 and C5.

    .. math::

        \max_{x, y}\ \sum_{i,k} v_{ik} x_{ik} + \sum_e w_e y_e
        \quad\text{s.t.}\quad \sum_k x_{ik} = 1,\ \ \sum_{ik} u_{ikp} x_{ik} \le C_p,\ \
        \sum_{ik \in \mathrm{chg}} x_{ik} \le B_t,\ \ y_e \le \sum_{ik \ni e} x_{ik}

    plus quota caps and the priority rule (see ``docs/selection.md``). Solved by HiGHS with a
    time limit and relative gap, warm-started from :func:`greedy`, which is also the fallback.

    Parameters
    ----------
    problem
        The tick's candidates, pools and constraints.
    time_limit_s, mip_rel_gap
        HiGHS limits (defaults from :class:`SelectorConfig`).
    warm_start
        Pass the greedy plan to HiGHS as a starting incumbent.

    Raises
    ------
    InvalidInput
        Malformed problem (unknown pools, duplicate keys, negative capacities, ...).
    InfeasibleError
        No plan satisfies the constraints.
    SolverLimitError, SolverError
        HiGHS found no incumbent and greedy found no plan either.
    """
    t0 = time.perf_counter()
    comp, cfg = _select_iv(problem, time_limit_s, mip_rel_gap, cfg)
    g_choice = greedy_choice(comp)
    g_obj = plan_objective(comp, g_choice) if g_choice is not None else -math.inf
    milp = formulate(comp, job_classes(comp) if cfg.merge_identical else None)
    start = None
    if warm_start and g_choice is not None:
        start = _start_vector(comp, milp, g_choice)
    lp_bound = math.inf
    if cfg.lp_fix and len(comp.cands) >= cfg.lp_fix_min_candidates:
        fixed, lp_bound = _lp_fixed(comp, milp, cfg, t0)
        if fixed is not None and (g_choice is None or fixed[1] > g_obj):
            start = fixed[0]
            # The LP optimum bounds the MILP: stop if the fixed plan is already within the gap.
            if _gap(fixed[1], lp_bound) <= cfg.mip_rel_gap:
                return _result(
                    comp,
                    _as_choice(comp, milp, fixed[0]),
                    SelectionStatus.OPTIMAL,
                    bound=lp_bound,
                    t0=t0,
                    greedy_objective=g_obj,
                    message="LP fixing within the LP bound",
                )
    res = solve_milp(
        milp,
        time_limit_s=_time_left(cfg, t0),
        mip_rel_gap=cfg.mip_rel_gap,
        start=start,
    )
    if start is not None and res.status == "optimal" and res.x is not None:
        # HiGHS may return the start it was given as "optimal" below its own bound (seen on a
        # small problem its presolve solves): then the start was never improved on, and a
        # solve without it finds the optimum.
        got = plan_objective(comp, _as_choice(comp, milp, res.x))
        if _gap(got, res.bound) > cfg.mip_rel_gap:
            res = solve_milp(milp, time_limit_s=_time_left(cfg, t0), mip_rel_gap=cfg.mip_rel_gap)
    if res.x is not None:
        choice = _as_choice(comp, milp, res.x)
        if not violations(comp, choice):
            obj = plan_objective(comp, choice)
            if g_choice is not None and g_obj > obj:
                choice, obj = g_choice, g_obj
            proved = _gap(obj, min(res.bound, lp_bound)) <= cfg.mip_rel_gap
            status = (
                SelectionStatus.OPTIMAL
                if res.status == "optimal" or proved
                else SelectionStatus.FEASIBLE_GAP
            )
            return _result(
                comp,
                choice,
                status,
                bound=min(res.bound, lp_bound),
                t0=t0,
                greedy_objective=g_obj,
                message=res.message,
            )
    if g_choice is not None:
        return _result(
            comp,
            g_choice,
            SelectionStatus.GREEDY_FALLBACK,
            bound=math.inf,
            t0=t0,
            greedy_objective=g_obj,
            message=f"HiGHS: {res.message}",
        )
    if res.status == "infeasible":
        raise InfeasibleError("select: no plan satisfies C1, C4 and C5")
    if res.status == "limit":
        raise SolverLimitError(f"select: HiGHS reached its limit without a plan ({res.message})")
    raise SolverError(f"select: HiGHS failed ({res.message})")


def _lp_fixed(
    comp: Compiled, milp: MilpArrays, cfg: SelectorConfig, t0: float
) -> tuple[tuple[np.ndarray, float] | None, float]:
    """LP-fixing heuristic: fix every job the LP relaxation makes integral, solve the rest.

    Returns (a full start vector and its plan objective, or ``None``) and the LP bound.
    """
    lp = solve_milp(milp, time_limit_s=_time_left(cfg, t0), mip_rel_gap=0.0, relax=True)
    if lp.x is None or lp.status != "optimal":
        return None, math.inf
    lp_bound = lp.bound
    lo, hi = milp.col_lo.copy(), milp.col_hi.copy()
    for members in milp.classes:
        cols = milp.cand_col[list(comp.job_slice(members[0]))]
        xs = lp.x[cols]
        if np.all(np.abs(xs - np.rint(xs)) < _INTEGRAL_TOL):
            lo[cols] = hi[cols] = np.rint(xs)
    res = solve_milp(
        milp,
        time_limit_s=_time_left(cfg, t0, share=cfg.lp_fix_time_share),
        mip_rel_gap=cfg.mip_rel_gap * _LP_FIX_GAP_SHARE,
        col_lo=lo,
        col_hi=hi,
    )
    if res.x is None:
        return None, lp_bound
    choice = _as_choice(comp, milp, res.x)
    if violations(comp, choice):
        return None, lp_bound
    return (res.x, plan_objective(comp, choice)), lp_bound


def _fill_reserve(comp: Compiled, choice: IntArray, start: np.ndarray, offset: int) -> np.ndarray:
    deferred = {i for i, k in enumerate(choice) if comp.is_defer[k]}
    keys = sorted(comp.protected)
    for j, (p, level) in enumerate(keys):
        on = any(
            lv >= level and any(h in deferred for h in jobs)
            for (q, lv), jobs in comp.protected.items()
            if q == p
        )
        start[offset + j] = float(on)
    return start
