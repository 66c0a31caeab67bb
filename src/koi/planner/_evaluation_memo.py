"""The evaluation memo: evaluated candidates kept across ticks, per job and candidate.

An evaluation (:meth:`koi.planner._evaluate.Evaluator.evaluate`) is a pure function of its
inputs; this memo keeps its result under them, so a candidate whose inputs are all unchanged
is not predicted, banded and scored again.  The evaluator builds the key (what the
evaluation reads) and names the global inputs (:meth:`EvaluationMemo.begin`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the entries hold the evaluator's results: import the type for checking
    from koi.planner._evaluate import Evaluated

__all__ = ["Effects", "Entry", "EvaluationMemo"]

#: What evaluating one candidate adds to the tick's exploration items, in the order it adds
#: them: (item, its U, whether it is a mechanism's).
Effects = tuple[tuple[Hashable, float, bool], ...]
#: A memo entry: the evaluation, the exploration items it recorded, the λ it was valued at and
#: the evidence the items' U were read from.
Entry = tuple["Evaluated", Effects, float, object]

# The evaluation memo starts over past this many candidates (it is a cache, not state).
_EVALUATIONS_MEMO = 50_000


class EvaluationMemo:
    """Evaluated candidates kept across ticks, per job: a candidate whose inputs are all
    unchanged is not predicted, banded and scored again (a memo: it only saves work).

    What an evaluation reads is in each entry's key: of its job (the job as planned, the
    ladder and how it was asked for, the job's current ladder, the corrections in force on
    both ladders' chains, its cost scale and ideal point, the clock for a batch job's required
    rate) and of the fleet's learning (the unit bands of its strata, from the residuals, ε and
    the pooled evidence in force).  Two reads are cheap enough to redo on a hit instead: the
    exploration items' U (replayed while the evidence is the same) and λ's weighing of the
    switching term.  What every evaluation reads
    in full — the mechanisms, the configuration, the DAG, the catalogs — is global: when any
    differs from the tick the entries were made in, every entry is dropped (:meth:`begin`).
    With the learning's inputs held while they move within their bands
    (:mod:`koi.planner._hold`), entries are reused across ticks in a running fleet.
    """

    def __init__(self) -> None:
        self._inputs: tuple[object, ...] | None = None
        self._entries: dict[tuple[object, ...], Entry] = {}
        self._evidence: object = None
        self.hits = 0
        self.misses = 0

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

    def evidence(self, evidence: object) -> object:
        """``evidence`` as the entries know it: the one seen before while it is equal (a
        tick without new evidence still builds a new store), so that entries compare it by
        identity."""
        seen = self._evidence
        if seen is not None and (seen is evidence or seen == evidence):
            return self._evidence
        self._evidence = evidence
        return evidence

    def get(self, key: tuple[object, ...]) -> Entry | None:
        hit = self._entries.get(key)
        self.hits += hit is not None
        self.misses += hit is None
        return hit

    def put(self, key: tuple[object, ...], entry: Entry) -> None:
        self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)
