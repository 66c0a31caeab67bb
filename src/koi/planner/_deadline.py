"""The tick's wall-clock deadline (``PlannerConfig.tick_deadline_s``).

Planning (snapshot, telemetry, learning, proposals, evaluation, selection) must end by
``plan_by``, four fifths of the way; the launchers and audit sinks get the rest, up to
``launch_by``.  Plugins are abandoned at these instants; koi's own stages check them between
jobs and fall back to the safe plan when planning runs out of time.  Without a deadline
(``None``, as in ``koi bench``) nothing here depends on the clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import attrs

from koi.errors import DeadlineError

__all__ = ["TickDeadline"]

_PLANNING_SHARE = 0.8
_MIN_SOLVER_S = 0.05


@attrs.frozen
class TickDeadline:
    """Monotonic instants a tick must meet; ``None`` means no deadline."""

    plan_by: float | None = None
    launch_by: float | None = None
    clock: Callable[[], float] = attrs.field(default=time.monotonic, repr=False, eq=False)

    @classmethod
    def start(
        cls, seconds: float | None, *, clock: Callable[[], float] = time.monotonic
    ) -> TickDeadline:
        if seconds is None:
            return cls(clock=clock)
        now = clock()
        return cls(now + _PLANNING_SHARE * seconds, now + seconds, clock)

    @property
    def passed(self) -> bool:
        """Whether planning is out of time."""
        return self.plan_by is not None and self.clock() >= self.plan_by

    def check(self, stage: str) -> None:
        """Raise :class:`DeadlineError` if planning is out of time after ``stage``."""
        if self.passed:
            raise DeadlineError(f"tick deadline: planning ran out of time after {stage}")

    def proposals(self, timeout_s: float | None) -> float:
        """A proposal round's deadline: its own timeout, cut at the planning deadline."""
        own = math.inf if timeout_s is None else self.clock() + timeout_s
        return min(own, math.inf if self.plan_by is None else self.plan_by)

    def solver_limit(self, limit_s: float | None) -> float | None:
        """The solver's time limit: its own, cut to the planning time left."""
        if self.plan_by is None:
            return limit_s
        left = max(self.plan_by - self.clock(), _MIN_SOLVER_S)
        return left if limit_s is None else min(limit_s, left)
