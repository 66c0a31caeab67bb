"""Quadrants, invariance verdicts and the documented belief-update table (DESIGN §4.4)."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koi.beliefs._beta import Beta
from koi.beliefs._store import EvidenceStore
from koi.beliefs._strata import EdgeKey, Stratum
from koi.errors import InvalidInput

__all__ = [
    "Quadrant",
    "UpdateTable",
    "Verdict",
    "combined_verdict",
    "update_for_evaluation",
    "update_mechanism",
]


class Quadrant(enum.StrEnum):
    """Outcome of one mechanism evaluation, from its mediator and outcome detectors."""

    Q1 = "q1"  # mediators match, outcomes match
    Q2 = "q2"  # mediators match, outcomes diverge
    Q3 = "q3"  # mediators diverge, outcomes match
    Q4 = "q4"  # mediators diverge, outcomes diverge

    @property
    def mediators_match(self) -> bool:
        return self in (Quadrant.Q1, Quadrant.Q2)

    @property
    def outcomes_match(self) -> bool:
        return self in (Quadrant.Q1, Quadrant.Q3)

    @property
    def mixed(self) -> bool:
        """Q2 and Q3 need the per-edge invariance test to decide whom to blame."""
        return self in (Quadrant.Q2, Quadrant.Q3)


class Verdict(enum.StrEnum):
    """Result of the invariance test for one edge."""

    ACCEPT = "accept"
    REJECT = "reject"
    UNDECIDED = "undecided"


Amount = tuple[float, float]


def _amount(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    ok = (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in value)
    )
    if not ok:
        msg = f"{attribute.name}: must be (support >= 0, contradict >= 0), got {value!r}"
        raise InvalidInput(msg)


def _pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@attrs.frozen
class UpdateTable:
    """``(quadrant, verdict) -> (support, contradict)`` added to each edge's Beta.

    ===========  ===========  ============  =============================================
    quadrant     verdict      (sup, con)    why
    ===========  ===========  ============  =============================================
    Q1           any          (1, 0)        the whole path predicted what happened
    Q2/Q3        accept       (0.5, 0)      this edge held across environments; the path
                                            as a whole did not, so only half a success
    Q2/Q3        reject       (0, 1)        this edge's child is not invariant: blame it
    Q2/Q3        undecided    (0, 0)        too little data to blame anyone
    Q4           any          (0, 1)        nothing on the path predicted what happened
    ===========  ===========  ============  =============================================

    All amounts are dyadic rationals, so sums are exact and order-independent in floating
    point as well as in the maths.
    """

    q1: Amount = attrs.field(default=(1.0, 0.0), converter=_pair, validator=_amount)
    q2_accept: Amount = attrs.field(default=(0.5, 0.0), converter=_pair, validator=_amount)
    q2_reject: Amount = attrs.field(default=(0.0, 1.0), converter=_pair, validator=_amount)
    q2_undecided: Amount = attrs.field(default=(0.0, 0.0), converter=_pair, validator=_amount)
    q3_accept: Amount = attrs.field(default=(0.5, 0.0), converter=_pair, validator=_amount)
    q3_reject: Amount = attrs.field(default=(0.0, 1.0), converter=_pair, validator=_amount)
    q3_undecided: Amount = attrs.field(default=(0.0, 0.0), converter=_pair, validator=_amount)
    q4: Amount = attrs.field(default=(0.0, 1.0), converter=_pair, validator=_amount)

    def amounts(self, quadrant: Quadrant, verdict: Verdict = Verdict.UNDECIDED) -> Amount:
        """``(support, contradict)`` for one edge; the verdict only matters in Q2/Q3."""
        quadrant, verdict = Quadrant(quadrant), Verdict(verdict)
        if quadrant is Quadrant.Q1:
            return self.q1
        if quadrant is Quadrant.Q4:
            return self.q4
        value: Amount = getattr(self, f"{quadrant.value}_{verdict.value}")
        return value


def combined_verdict(verdicts: Iterable[Verdict]) -> Verdict:
    """A mechanism's verdict: reject if any edge is rejected, accept if all are accepted."""
    seen = {Verdict(v) for v in verdicts}
    if Verdict.REJECT in seen:
        return Verdict.REJECT
    if seen == {Verdict.ACCEPT}:
        return Verdict.ACCEPT
    return Verdict.UNDECIDED


def update_for_evaluation(
    store: EvidenceStore,
    mechanism_edges: Iterable[EdgeKey],
    stratum: Stratum,
    quadrant: Quadrant,
    verdicts: Mapping[EdgeKey, Verdict] | None = None,
    *,
    table: UpdateTable | None = None,
) -> EvidenceStore:
    """Update every edge of one evaluated mechanism in ``stratum``.

    ``verdicts`` holds the invariance verdict per edge; it is read only in Q2/Q3, where an
    edge without a verdict is treated as undecided.
    """
    table = UpdateTable() if table is None else table
    verdicts = {} if verdicts is None else verdicts
    updates = []
    for edge in dict.fromkeys((e[0], e[1]) for e in mechanism_edges):
        verdict = verdicts.get(edge, Verdict.UNDECIDED)
        updates.append(((edge, stratum), table.amounts(quadrant, verdict)))
    return store.apply_many(updates)


def update_mechanism(
    belief: Beta,
    quadrant: Quadrant,
    verdicts: Iterable[Verdict] = (),
    *,
    table: UpdateTable | None = None,
) -> Beta:
    """Update a mechanism's own Beta with the table row of its :func:`combined_verdict`."""
    table = UpdateTable() if table is None else table
    support, contradict = table.amounts(quadrant, combined_verdict(verdicts))
    return belief.updated(support, contradict)
