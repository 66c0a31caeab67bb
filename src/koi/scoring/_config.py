"""Every default of the scoring layer, in one frozen object (the lead folds it into KoiConfig)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types.validators import non_negative, positive

__all__ = ["ScoringConfig"]


def _rho(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (isinstance(value, int | float) and 0 < value <= 0.1):
        raise InvalidInput(f"{attribute.name}: must be in (0, 0.1], got {value!r}")


def _bandwidths(value: Any) -> tuple[tuple[str, float], ...]:
    items = value.items() if hasattr(value, "items") else value
    try:
        return tuple(sorted((str(k), float(v)) for k, v in items))
    except (TypeError, ValueError):
        msg = f"load_gb_s_by_gpu: must map GPU names to GB/s, got {value!r}"
        raise InvalidInput(msg) from None


@attrs.frozen
class ScoringConfig:
    """Constants of the plan score ``Φ(P)`` (paper §2.4, DESIGN §5).

    Objective shaping
        ``rho`` — augmentation weight of the Tchebycheff sum (default 5e-3, inside the
        documented 1e-3 … 1e-2 range). ``violation_slope`` — extra gap per unit of relative
        violation of an SLO-constrained objective (a latency over its bound, throughput under
        the required rate, a negative SLO margin). ``max_ratio`` caps every normalized gap so an
        infinite predicted latency stays finite. ``batch_ttft_scale_ms`` / ``batch_tpot_scale_ms``
        normalise latencies of batch jobs, which have no latency bound.
        ``min_required_tok_s`` floors the required throughput (far below any service's
        traffic: a floor above a job's offered rate makes every ladder look short of it).
    Deferral
        ``deferral_gap`` — the gap every objective gets when a job is not served (default: the
        largest gap a served ladder can score, ``max_ratio``, so serving always beats deferring
        unless the ladder is hopeless).
        ``online_deferral_factor`` multiplies it for online jobs; batch jobs move from
        ``batch_deferral_factor`` (lots of slack) to the online factor as the deadline slack
        shrinks below ``batch_urgency_horizon_s``. ``priority_step`` adds this fraction per
        priority level.
    Risk, switching, exploration
        ``gamma`` (fixed risk weight), ``lambda_switch`` and ``beta`` (initial values of the
        slow-loop knobs λ_t and β_t), ``omega_m`` (mechanism weight in Expl).
        ``usd_per_score_unit`` converts switching dollars into score units. Cold start uses
        ``load_gb_s`` (weights read per GPU per second; per GPU kind in ``load_gb_s_by_gpu``),
        ``warmup_s``; kill uses ``drain_s`` and ``lost_request_fraction`` ×
        ``usd_per_lost_request``; risk uses ``transient_s`` × ``breach_usd_multiplier``.
    """

    rho: float = attrs.field(default=5e-3, validator=_rho)
    violation_slope: float = attrs.field(default=4.0, validator=non_negative)
    max_ratio: float = attrs.field(default=100.0, validator=positive)
    batch_ttft_scale_ms: float = attrs.field(default=30_000.0, validator=positive)
    batch_tpot_scale_ms: float = attrs.field(default=200.0, validator=positive)
    min_required_tok_s: float = attrs.field(default=1e-3, validator=positive)
    deferral_gap: float = attrs.field(default=20.0, validator=positive)
    online_deferral_factor: float = attrs.field(default=4.0, validator=positive)
    batch_deferral_factor: float = attrs.field(default=0.5, validator=positive)
    batch_urgency_horizon_s: float = attrs.field(default=1800.0, validator=positive)
    priority_step: float = attrs.field(default=0.5, validator=non_negative)
    gamma: float = attrs.field(default=2.0, validator=non_negative)
    lambda_switch: float = attrs.field(default=1.0, validator=non_negative)
    beta: float = attrs.field(default=0.2, validator=non_negative)
    omega_m: float = attrs.field(default=0.5, validator=non_negative)
    usd_per_score_unit: float = attrs.field(default=10.0, validator=positive)
    load_gb_s: float = attrs.field(default=2.0, validator=positive)
    load_gb_s_by_gpu: tuple[tuple[str, float], ...] = attrs.field(default=(), converter=_bandwidths)
    warmup_s: float = attrs.field(default=60.0, validator=non_negative)
    drain_s: float = attrs.field(default=30.0, validator=non_negative)
    lost_request_fraction: float = attrs.field(default=0.1, validator=non_negative)
    usd_per_lost_request: float = attrs.field(default=0.01, validator=non_negative)
    transient_s: float = attrs.field(default=300.0, validator=non_negative)
    breach_usd_multiplier: float = attrs.field(default=3.0, validator=non_negative)

    def __attrs_post_init__(self) -> None:
        for gpu, bw in self.load_gb_s_by_gpu:
            if not (math.isfinite(bw) and bw > 0):
                raise InvalidInput(f"load_gb_s_by_gpu[{gpu!r}]: must be > 0, got {bw!r}")

    def load_bandwidth(self, gpu: str) -> float:
        """Weight-load bandwidth in GB/s per GPU of kind ``gpu`` (falls back to ``load_gb_s``)."""
        return dict(self.load_gb_s_by_gpu).get(gpu, self.load_gb_s)
