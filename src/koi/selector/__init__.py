"""Joint selection (paper §2.6, DESIGN §6): one candidate per job under C1, C4 and C5.

:func:`select` solves the MILP with HiGHS (``highspy``, imported lazily), warm-started from
:func:`greedy`, which is also the fallback. :class:`BudgetBooks` is the root planner's LP
relaxation (a sparse LP, also solved by HiGHS) that bounds where each job's candidates come from.
No solver object leaves this package.
"""

from __future__ import annotations

from koi.selector._budget import BudgetBook, BudgetBooks, BudgetConfig, JobDemand
from koi.selector._model import (
    Candidate,
    PoolCapacity,
    Selection,
    SelectionProblem,
    SelectionStatus,
    SelectorConfig,
    pool_capacities,
)
from koi.selector._select import greedy, select

__all__ = [
    "BudgetBook",
    "BudgetBooks",
    "BudgetConfig",
    "Candidate",
    "JobDemand",
    "PoolCapacity",
    "Selection",
    "SelectionProblem",
    "SelectionStatus",
    "SelectorConfig",
    "greedy",
    "pool_capacities",
    "select",
]
