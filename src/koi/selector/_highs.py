"""The only module that touches highspy. Nothing from it leaves :mod:`koi.selector`."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from koi.selector._compile import FloatArray
from koi.selector._formulate import MilpArrays

__all__ = ["MilpResult", "solve_milp"]

# HighsModelStatus name -> koi outcome ("optimal", "limit", "infeasible", "error").
_STATUS = {
    "kOptimal": "optimal",
    "kTimeLimit": "limit",
    "kIterationLimit": "limit",
    "kSolutionLimit": "limit",
    "kObjectiveBound": "limit",
    "kObjectiveTarget": "limit",
    "kInterrupt": "limit",
    "kHighsInterrupt": "limit",
    "kMemoryLimit": "limit",
    "kInfeasible": "infeasible",
    "kUnboundedOrInfeasible": "infeasible",
}


@attrs.frozen
class MilpResult:
    """Solver-free result: ``x`` is ``None`` when no incumbent exists."""

    status: str
    x: FloatArray | None
    objective: float
    bound: float
    message: str


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence fd 1: HiGHS prints a banner the first time a ``Highs`` is built in a process,
    before any option can turn output off."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:  # noqa: PTH123
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _new_highs() -> Any:
    import highspy

    with quiet_stdout():
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.silent()
    return h


def solve_milp(
    m: MilpArrays,
    *,
    time_limit_s: float,
    mip_rel_gap: float,
    start: FloatArray | None = None,
    col_lo: FloatArray | None = None,
    col_hi: FloatArray | None = None,
    relax: bool = False,
) -> MilpResult:
    """Maximise ``m`` with a fresh HiGHS instance; never raises a highspy exception.

    ``col_lo`` / ``col_hi`` override the column bounds (to fix variables); ``relax`` solves the
    LP relaxation and returns its solution with ``bound`` equal to the LP optimum.
    """
    import highspy

    try:
        h = _new_highs()
        lp = highspy.HighsLp()
        n_col, n_row = m.A.shape[1], m.A.shape[0]
        lp.num_col_ = n_col
        lp.num_row_ = n_row
        lp.col_cost_ = m.c
        lp.col_lower_ = m.col_lo if col_lo is None else col_lo
        lp.col_upper_ = m.col_hi if col_hi is None else col_hi
        lp.row_lower_ = m.row_lo
        lp.row_upper_ = m.row_hi
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = m.A.indptr.astype(np.int32)
        lp.a_matrix_.index_ = m.A.indices.astype(np.int32)
        lp.a_matrix_.value_ = m.A.data.astype(float)
        kinds = [
            highspy.HighsVarType.kInteger if v else highspy.HighsVarType.kContinuous
            for v in m.integrality
        ]
        if not relax:
            lp.integrality_ = kinds
        h.passModel(lp)
        if math.isfinite(time_limit_s):  # HiGHS' default is no limit
            h.setOptionValue("time_limit", float(max(time_limit_s, 1e-3)))
        h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
        h.setOptionValue("random_seed", 0)
        # One thread: measured faster here than HiGHS' default. HiGHS has one process-wide task
        # scheduler; another solve (another library's HiGHS) may have started it with another size,
        # which makes run() fail, so reset it first.
        h.setOptionValue("threads", 1)
        h.resetGlobalScheduler(True)  # noqa: FBT003  pybind signature is positional-only
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(map(float, start))
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        name = h.modelStatusToString(h.getModelStatus())
        status_name = str(h.getModelStatus()).rsplit(".", 1)[-1]
        status = _STATUS.get(status_name, "error")
        info = h.getInfo()
        has_x = int(info.primal_solution_status) == 2
        x = np.asarray(h.getSolution().col_value, dtype=float) if has_x else None
        obj = float(info.objective_function_value) if has_x else -math.inf
        bound = float(info.objective_function_value) if relax else float(info.mip_dual_bound)
        if not math.isfinite(bound):
            bound = math.inf
        return MilpResult(status, x, obj, bound, name)
    except Exception as exc:
        return MilpResult("error", None, -math.inf, math.inf, f"{type(exc).__name__}: {exc}")
