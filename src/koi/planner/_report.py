"""What a tick returns: the plan and everything that justifies it."""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from koi.types import ActionKind, Ladder, Outcomes, Plan, Rank
from koi.types.validators import to_tuple

__all__ = ["AtRisk", "CandidateReport", "LearnReport", "TickResult", "Verdict"]


class Verdict(enum.StrEnum):
    """Why a job is at risk."""

    HOPELESS = "hopeless"  # no candidate anywhere in the fleet meets its target
    CAPACITY = "capacity"  # some would, none fits what is free (and no room was made)
    DEADLINE = "deadline"  # a batch job late at its current rate, or waiting past its slack
    BREACH = "breach"  # its ladder is predicted past C3's bound
    UNSERVED = "unserved"  # an online job left unserved without a verdict this tick


@attrs.frozen
class AtRisk:
    """A job the plan may not serve within its target, and why (``detail`` says it in words;
    ``breach_probability`` is that of the ladder the plan gives it, 1 when it gets none)."""

    job_id: str
    verdict: Verdict
    detail: str
    breach_probability: float = 1.0


@attrs.frozen
class LearnReport:
    """What S2/S3 learned this tick.

    ``compared`` observations were paired with their predictions (``skipped`` says why the
    others were not); ``divergences`` name the (stratum, variable) CUSUM detectors that fired,
    ``quadrants`` count the verdicts per quadrant and ``q1_rate`` is the Q1 share (``None``
    when nothing was decided); ``coverage`` is the share of observed outcomes inside their
    risk band.  ``diverged`` / ``examples`` feed the mechanism miner.  ``mean_uncertainty``
    and ``mechanisms`` describe the evidence the plan was made with.
    """

    compared: int = 0
    skipped: tuple[str, ...] = ()
    divergences: tuple[str, ...] = ()
    quadrants: Mapping[str, int] = attrs.field(factory=dict)
    q1_rate: float | None = None
    coverage: float | None = None
    diverged: tuple[tuple[str, str], ...] = ()
    examples: Mapping[str, Rank] = attrs.field(factory=dict)
    mean_uncertainty: float | None = None
    mechanisms: int = 0


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
    keep every active job, defer every pending one, stop finished jobs and shed what no longer
    fits a shrunk pool.  ``learning`` is what S2/S3 learned.  ``committed`` is false when the
    checkpoint could not be written: the plan was then not launched and the planner's state did
    not move.  ``at_risk`` lists the jobs the plan may not serve within their target: hopeless
    ones served best effort or refused, jobs waiting for capacity, batch jobs late at their
    current rate, ladders predicted past C3's bound, online jobs left unserved without a verdict.
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
    learning: LearnReport = attrs.field(factory=lambda: LearnReport())
    committed: bool = True
    at_risk: tuple[AtRisk, ...] = attrs.field(default=(), converter=to_tuple)

    def candidates_for(self, job_id: str) -> tuple[CandidateReport, ...]:
        """This job's candidates, best value first."""
        mine = [c for c in self.candidates if c.job_id == job_id]
        return tuple(sorted(mine, key=lambda c: (bool(c.rejected), -c.value, c.key)))
