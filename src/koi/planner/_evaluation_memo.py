"""The evaluation memo: evaluated candidates kept across ticks, per job and candidate.

An evaluation (:meth:`koi.planner._evaluate.Evaluator.evaluate`) is a pure function of its
inputs; this memo keeps its result under them, so a candidate whose inputs are all unchanged
is not predicted, banded and scored again.  The evaluator builds the key (what the
evaluation reads of its job) and names the global inputs (:meth:`EvaluationMemo.begin`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the entries hold the evaluator's results: import the type for checking
    from koi.planner._evaluate import Evaluated

__all__ = ["Effects", "EvaluationMemo"]

#: What evaluating one candidate adds to the tick's exploration items, in the order it adds
#: them: (item, its U, whether it is a mechanism's).
Effects = tuple[tuple[Hashable, float, bool], ...]

# The evaluation memo starts over past this many candidates (it is a cache, not state).
_EVALUATIONS_MEMO = 50_000


class EvaluationMemo:
    """Evaluated candidates kept across ticks, per job: a candidate whose inputs are all
    unchanged is not predicted, banded and scored again (a memo: it only saves work).

    What a job's evaluation reads of its own is in each entry's key (the job as planned, the
    ladder and how it was asked for, the job's current ladder, the corrections in force on
    both ladders' chains, its cost scale and its ideal point).  What it reads of the fleet's
    learning is global — the band's ε and the residuals, the pooled evidence behind C3's prior
    and the exploration items, λ, the mechanisms — and so is the clock (batch jobs' required
    rate): when any of these differs from the tick the entries were made in, every entry is
    dropped (:meth:`begin`).  The evidence, ε and λ move on every tick that brings telemetry,
    so in a running fleet this memo serves the ticks with none: a re-plan of the same snapshot,
    an advisory tick, a fleet between telemetry windows.
    """

    def __init__(self) -> None:
        self._inputs: tuple[object, ...] | None = None
        self._entries: dict[tuple[object, ...], tuple[Evaluated, Effects]] = {}
        self.hits = 0

    def begin(self, inputs: tuple[object, ...]) -> None:
        """Start a tick whose global inputs are ``inputs``: keep the entries only if they
        are the ones the entries were made with."""
        old = self._inputs
        same = (
            old is not None
            and len(old) == len(inputs)
            and all(a is b or a == b for a, b in zip(old, inputs, strict=True))
        )
        if not same or len(self._entries) > _EVALUATIONS_MEMO:
            self._entries.clear()
        self._inputs = inputs

    def get(self, key: tuple[object, ...]) -> tuple[Evaluated, Effects] | None:
        hit = self._entries.get(key)
        self.hits += hit is not None
        return hit

    def put(self, key: tuple[object, ...], entry: tuple[Evaluated, Effects]) -> None:
        self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)
