"""Outcomes Y, mediators V and telemetry observations."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types._deploy import Chain
from koi.types._enums import Mediator, Outcome
from koi.types.validators import (
    boolean,
    finite,
    fraction,
    identifier,
    instance_of,
    non_negative,
    non_negative_int,
    non_negative_or_inf,
    to_tuple,
)

__all__ = ["Mediators", "Observation", "Outcomes", "Resolution", "variable_names"]


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
    replica, ``memory_pressure`` (weights + activations) / VRAM, ``prefix_hit_rate`` the
    fraction of the shared-prefix tokens served from the prefix cache (0 for a job without
    shared prefixes; a telemetry source that cannot measure it lists it in
    ``Observation.missing``).
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
    prefix_hit_rate: float = attrs.field(default=0.0, validator=fraction)

    def get(self, mediator: Mediator) -> float:
        value: float = getattr(self, mediator.value)
        return value

    def as_dict(self) -> dict[Mediator, float]:
        return {m: self.get(m) for m in Mediator}


def variable_names() -> frozenset[str]:
    """Every variable an observation can carry: the outcome and mediator field names."""
    return _VARIABLES


_VARIABLES = frozenset(o.value for o in Outcome) | frozenset(m.value for m in Mediator)


def _names(value: object) -> tuple[str, ...]:
    """Converter: any iterable of variable names becomes a sorted, duplicate-free tuple."""
    if isinstance(value, str):
        return (value,)  # the validator names the field if this is not a variable
    return tuple(sorted(set(value)))  # type: ignore[call-overload]


def _known_variables(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise InvalidInput(f"{attribute.name}: must be a list of variable names, got {value!r}")
    unknown = [v for v in value if v not in _VARIABLES]
    if unknown:
        raise InvalidInput(f"{attribute.name}: unknown variable(s) {unknown}")


@attrs.frozen
class Resolution:
    """Where a measured value really lies: somewhere in ``[low, high]``.

    A p99 read from a latency histogram is an interpolation inside the bucket that holds the
    99th percentile; the true p99 can be anywhere in that bucket.  ``high`` may be infinite (the
    quantile fell in the ``+Inf`` bucket: the value is at least ``low``).

    .. versionadded:: 0.1
    """

    variable: str = attrs.field(validator=identifier)
    low: float = attrs.field(validator=non_negative)
    high: float = attrs.field(validator=non_negative_or_inf)

    def __attrs_post_init__(self) -> None:
        if self.variable not in _VARIABLES:
            raise InvalidInput(f"variable: unknown variable {self.variable!r}")
        if self.high < self.low:
            raise InvalidInput(f"high: must be >= low ({self.low}), got {self.high}")

    @property
    def relative_width(self) -> float:
        """``(high - low) / high``: 0 for an exact value, 1 for a bucket that starts at 0."""
        if self.high == 0:
            return 0.0
        if math.isinf(self.high):
            return 1.0
        return (self.high - self.low) / self.high

    def closest(self, value: float) -> float:
        """The point of ``[low, high]`` nearest ``value`` (``value`` itself when inside)."""
        return min(self.high, max(self.low, value))


def _named_values(value: Any) -> tuple[tuple[Any, Any], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    out = []
    for k, item in enumerate(to_tuple(items)):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidInput(f"replica_tpot_ms[{k}]: expected a (name, value) pair, got {item!r}")
        out.append((item[0], item[1]))
    return tuple(out)


@attrs.frozen
class Observation:
    """Telemetry for one deployed rank over one window ``[start_s, end_s)``.

    p99s in ``outcomes`` are computed from the window's request samples, never averaged.
    ``replicas_up`` counts replicas that actually serve (a launch can partially fail).

    A real telemetry source rarely measures everything: the names in ``missing`` (outcome and
    mediator field names, e.g. ``"comm_share"``) were **not measured**, and their values in
    ``outcomes`` / ``mediators`` are placeholders (0) that nothing may read; use
    :meth:`measured`, which returns ``None`` for them.  ``resolution`` says, for values read
    from coarse data such as histogram buckets, the interval the true value lies in; the
    planner's learning counts only the part of a miss that the interval cannot explain.

    ``replica_tpot_ms`` maps a replica's name (the host's: a pod, a process) to its median
    TPOT over the window, for the replicas that finished enough requests to say; a source with
    per-replica metrics (one scrape target per engine pod) reports it, others leave it empty.
    A replica far slower than its siblings window after window is a fault of that replica — a
    bad GPU, a throttled host — not of the chain (:meth:`slow_replicas`).

    .. versionchanged:: 0.1
       ``missing`` and ``resolution`` (both empty by default); ``replica_tpot_ms``.
    """

    job_id: str = attrs.field(validator=identifier)
    chain: Chain = attrs.field(validator=instance_of(Chain))
    start_s: float = attrs.field(validator=non_negative)
    end_s: float = attrs.field(validator=non_negative)
    requests: int = attrs.field(validator=non_negative_int)
    completed: int = attrs.field(validator=non_negative_int)
    replicas_up: int = attrs.field(validator=non_negative_int)
    outcomes: Outcomes = attrs.field(validator=instance_of(Outcomes))
    mediators: Mediators = attrs.field(validator=instance_of(Mediators))
    healthy: bool = attrs.field(default=True, validator=boolean)
    missing: tuple[str, ...] = attrs.field(default=(), converter=_names, validator=_known_variables)
    resolution: tuple[Resolution, ...] = attrs.field(default=(), converter=to_tuple)
    replica_tpot_ms: tuple[tuple[str, float], ...] = attrs.field(
        default=(), converter=_named_values
    )

    def __attrs_post_init__(self) -> None:
        names: set[object] = set()
        for k, (name, t) in enumerate(self.replica_tpot_ms):
            if not isinstance(name, str) or not name or name in names:
                raise InvalidInput(
                    f"replica_tpot_ms[{k}]: a replica needs a unique name, got {name!r}"
                )
            names.add(name)
            if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t < math.inf:
                raise InvalidInput(
                    f"replica_tpot_ms[{name}]: must be a finite number >= 0, got {t!r}"
                )
        if self.end_s <= self.start_s:
            msg = f"end_s: must be > start_s ({self.start_s}), got {self.end_s}"
            raise InvalidInput(msg)
        seen: set[str] = set()
        items: tuple[object, ...] = self.resolution
        for k, item in enumerate(items):
            if not isinstance(item, Resolution):
                msg = f"resolution[{k}]: expected a Resolution, got {type(item).__name__}"
                raise InvalidInput(msg)
            r = item
            if r.variable in seen:
                raise InvalidInput(f"resolution[{k}]: {r.variable!r} is given twice")
            if r.variable in self.missing:
                raise InvalidInput(f"resolution[{k}]: {r.variable!r} is listed as missing")
            seen.add(r.variable)

    def measured(self, variable: Outcome | Mediator | str) -> float | None:
        """The measured value of an outcome or mediator, or ``None`` if it was not measured."""
        name = str(variable.value if isinstance(variable, Outcome | Mediator) else variable)
        if name in self.missing:
            return None
        if name in _OUTCOME_NAMES:
            return self.outcomes.get(Outcome(name))
        if name in _MEDIATOR_NAMES:
            return self.mediators.get(Mediator(name))
        raise InvalidInput(f"variable: unknown variable {name!r}")

    def slow_replicas(self, ratio: float) -> frozenset[str]:
        """The replicas whose TPOT is more than ``ratio`` times the norm: the median over the
        replicas measured, or the faster of two (none with fewer than two measured)."""
        tpots = [t for _, t in self.replica_tpot_ms]
        if len(tpots) < 2:
            return frozenset()
        norm = min(tpots) if len(tpots) == 2 else statistics.median(tpots)
        return frozenset(name for name, t in self.replica_tpot_ms if t > ratio * norm)

    def bounds(self, variable: Outcome | Mediator | str) -> Resolution | None:
        """The interval a measured value lies in, when the source gave one."""
        name = str(variable.value if isinstance(variable, Outcome | Mediator) else variable)
        return next((r for r in self.resolution if r.variable == name), None)


_OUTCOME_NAMES = frozenset(o.value for o in Outcome)
_MEDIATOR_NAMES = frozenset(m.value for m in Mediator)
