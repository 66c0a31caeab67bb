"""What a ladder proposer is given for one job in one S4↔S5 round."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from koi.beliefs import EvidenceStore
from koi.dag import DagView, Mechanism, node_value
from koi.errors import InvalidInput
from koi.selector import BudgetBook
from koi.surrogate import RankCorrection
from koi.types import Chain, ClusterSnapshot, GpuSpec, Ladder, ModelSpec, Outcome
from koi.types.validators import non_negative_int, not_nan, positive_int

__all__ = ["ProposalContext"]


def _mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A private copy: a proposer can neither see later edits nor make any.
    return dict(value)


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _outcome(value: object) -> Outcome:
    if isinstance(value, Outcome):
        return value
    found: object = None
    if isinstance(value, str):
        try:
            found = node_value(value) if ":" in value else Outcome(value)
        except (InvalidInput, ValueError):
            found = None
    if not isinstance(found, Outcome):
        names = [o.value for o in Outcome]
        raise InvalidInput(f"at_risk: must name outcomes from {names}, got {value!r}")
    return found


def _counts(value: Mapping[str, Any]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for pool, n in dict(value).items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidInput(f"reclaimable[{pool!r}]: must be an integer >= 0, got {n!r}")
        out[str(pool)] = n
    return out


def _outcomes(value: Iterable[object]) -> tuple[Outcome, ...]:
    return tuple(_outcome(v) for v in value)


def _mechanisms(value: Iterable[object]) -> tuple[Mechanism, ...]:
    out: list[Mechanism] = []
    for k, m in enumerate(value):
        if not isinstance(m, Mechanism):
            raise InvalidInput(f"mechanisms[{k}]: expected a Mechanism, got {type(m).__name__}")
        out.append(m)
    return tuple(out)


@attrs.frozen
class ProposalContext:
    """Everything a ladder proposer may use for one job in one S4↔S5 round.

    ``budget`` is the job's budget book (or ``None``: every pool), ``dag`` the backward-query
    view of the causal graph with the fleet's edge beliefs (or ``None``), ``mechanisms`` the
    admitted mechanisms whose scope matches the job.  ``at_risk`` are the outcomes the planner
    predicts the job's incumbent to be past or near its bound on; the backward query starts
    from them; ``breached`` are those it is predicted past.  ``evidence`` is the planner's
    belief store (``None`` without the causal graph): the uncertainty of each stratum, which
    exploration steers by.  ``feedback`` carries diagnostics on the previous round's
    candidates (why they were invalid or did not improve).
    ``deadline_s`` is a :func:`time.monotonic` instant a proposer must return before (``inf``:
    none, as in the benchmark, whose plans must not depend on the machine's speed).
    ``reclaimable`` counts, per pool, GPUs other jobs could release for this one this tick
    (making room); a proposer may place on them as if they were free, and the joint selection
    takes the ladder only together with the other jobs' smaller ladders.
    ``corrections`` are the residual corrections in force for the job, per chain (the callback
    the evaluator predicts with; ``None``: the surrogate's prior): a proposer that sizes with
    them sizes for the capacity the evaluator will credit.

    .. versionadded:: 0.1
    """

    snapshot: ClusterSnapshot
    gpus: Mapping[str, GpuSpec] = attrs.field(converter=_mapping, hash=False)
    models: Mapping[str, ModelSpec] = attrs.field(converter=_mapping, hash=False)
    deadline_s: float = attrs.field(default=math.inf, validator=not_nan)
    budget: BudgetBook | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(BudgetBook)),
        hash=False,
    )
    dag: DagView | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(DagView)),
        hash=False,
    )
    mechanisms: tuple[Mechanism, ...] = attrs.field(default=(), converter=_mechanisms, hash=False)
    incumbent: Ladder | None = None
    feedback: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    round: int = attrs.field(default=0, validator=non_negative_int)
    max_candidates: int = attrs.field(default=8, validator=positive_int)
    at_risk: tuple[Outcome, ...] = attrs.field(default=(), converter=_outcomes)
    breached: tuple[Outcome, ...] = attrs.field(default=(), converter=_outcomes)
    evidence: EvidenceStore | None = attrs.field(default=None, hash=False, eq=False)
    reclaimable: Mapping[str, int] = attrs.field(factory=dict, converter=_counts, hash=False)
    corrections: Callable[[Chain], RankCorrection] | None = attrs.field(
        default=None, hash=False, eq=False
    )
