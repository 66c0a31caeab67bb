"""The planner: the S0–S7 tick, its state and checkpoints (paper §2.1, §2.5, §2.6).

>>> from koi.planner import Planner                      # doctest: +SKIP
>>> result = Planner(state_path="koi-state.json").tick(snapshot, observations)
"""

from __future__ import annotations

from koi.planner._planner import Planner
from koi.planner._report import CandidateReport, TickResult
from koi.planner._state import LedgerEntry, PlannerState

__all__ = ["CandidateReport", "LedgerEntry", "Planner", "PlannerState", "TickResult"]
