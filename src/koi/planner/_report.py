"""What a tick returns: the plan and everything that justifies it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koi.types import ActionKind, Ladder, Outcomes, Plan
from koi.types.validators import to_tuple

__all__ = ["CandidateReport", "TickResult"]


@attrs.frozen
class CandidateReport:
    """One candidate ladder for one job, as S5 evaluated it.

    ``value`` is the job's term of Φ without exploration: ``J - γ p - λ Switch``.  ``rejected``
    says why a candidate never entered the joint selection (C2 feasibility, C3 risk, capacity);
    it is empty for candidates the selector could choose.
    """

    job_id: str
    key: str
    kind: ActionKind
    ladder: Ladder
    sources: tuple[str, ...] = attrs.field(default=(), converter=to_tuple)
    outcomes: Outcomes | None = None
    breach_probability: float = 0.0
    tchebycheff: float = 0.0
    switch_usd: float = 0.0
    value: float = 0.0
    exploration_items: int = 0
    rejected: str = ""
    chosen: bool = False


@attrs.frozen
class TickResult:
    """The committed plan of one tick, with candidates, solver status, knobs and timings.

    ``fallback`` is set (with ``errors``) when a stage failed and the plan is the safe one:
    keep every active job, defer every pending one.
    """

    plan: Plan
    candidates: tuple[CandidateReport, ...] = attrs.field(converter=to_tuple)
    selector_status: str
    objective: float
    gap: float
    binding: tuple[str, ...] = attrs.field(default=(), converter=to_tuple)
    knobs: Mapping[str, float] = attrs.field(factory=dict)
    timings_s: Mapping[str, float] = attrs.field(factory=dict)
    errors: tuple[str, ...] = attrs.field(default=(), converter=to_tuple)
    fallback: bool = False
    evidence: Mapping[str, Any] = attrs.field(factory=dict)

    def candidates_for(self, job_id: str) -> tuple[CandidateReport, ...]:
        """This job's candidates, best value first."""
        mine = [c for c in self.candidates if c.job_id == job_id]
        return tuple(sorted(mine, key=lambda c: (bool(c.rejected), -c.value, c.key)))
