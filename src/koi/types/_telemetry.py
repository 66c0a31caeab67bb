"""Outcomes Y, mediators V and telemetry observations."""

from __future__ import annotations

import attrs

from koi.errors import InvalidInput
from koi.types._deploy import Chain
from koi.types._enums import Mediator, Outcome
from koi.types.validators import (
    finite,
    fraction,
    identifier,
    non_negative,
    non_negative_int,
    non_negative_or_inf,
)

__all__ = ["Mediators", "Observation", "Outcomes"]


@attrs.frozen
class Outcomes:
    """The five serving outcomes of a ladder or rank (paper §2.2).

    ``slo_margin`` is the relative headroom to the tightest target: ``min_j (bound_j - y_j) /
    bound_j`` over the job's constrained objectives (negative when violated).
    """

    cost_per_mtok_usd: float = attrs.field(validator=non_negative_or_inf)
    p99_ttft_ms: float = attrs.field(validator=non_negative_or_inf)
    p99_tpot_ms: float = attrs.field(validator=non_negative_or_inf)
    throughput_tok_s: float = attrs.field(validator=non_negative)
    slo_margin: float = attrs.field(validator=finite)

    def get(self, outcome: Outcome) -> float:
        value: float = getattr(self, outcome.value)
        return value

    def as_dict(self) -> dict[Outcome, float]:
        return {o: self.get(o) for o in Outcome}


@attrs.frozen
class Mediators:
    """Runtime mediators V (DESIGN §4.1); every one is predicted and measured.

    Utilisations and shares are fractions; ``mean_batch_size`` is running sequences per replica,
    ``queue_depth`` waiting requests per replica, ``preemption_rate`` KV evictions per second per
    replica, ``memory_pressure`` (weights + activations) / VRAM.
    """

    kv_cache_util: float = attrs.field(validator=fraction)
    mean_batch_size: float = attrs.field(validator=non_negative)
    queue_depth: float = attrs.field(validator=non_negative)
    mem_bw_util: float = attrs.field(validator=fraction)
    compute_util: float = attrs.field(validator=fraction)
    comm_share: float = attrs.field(validator=fraction)
    bubble_fraction: float = attrs.field(validator=fraction)
    preemption_rate: float = attrs.field(validator=non_negative)
    prefill_share: float = attrs.field(validator=fraction)
    memory_pressure: float = attrs.field(validator=non_negative)

    def get(self, mediator: Mediator) -> float:
        value: float = getattr(self, mediator.value)
        return value

    def as_dict(self) -> dict[Mediator, float]:
        return {m: self.get(m) for m in Mediator}


@attrs.frozen
class Observation:
    """Telemetry for one deployed rank over one window ``[start_s, end_s)``.

    p99s in ``outcomes`` are computed from the window's request samples, never averaged.
    ``replicas_up`` counts replicas that actually serve (a launch can partially fail).
    """

    job_id: str = attrs.field(validator=identifier)
    chain: Chain
    start_s: float = attrs.field(validator=non_negative)
    end_s: float = attrs.field(validator=non_negative)
    requests: int = attrs.field(validator=non_negative_int)
    completed: int = attrs.field(validator=non_negative_int)
    replicas_up: int = attrs.field(validator=non_negative_int)
    outcomes: Outcomes
    mediators: Mediators
    healthy: bool = True

    def __attrs_post_init__(self) -> None:
        if self.end_s <= self.start_s:
            msg = f"end_s: must be > start_s ({self.start_s}), got {self.end_s}"
            raise InvalidInput(msg)
