"""Every constant of the simulated fleet, in frozen attrs config classes.

The lead composes :class:`SimConfig` into the global ``KoiConfig``; nothing in ``koi.sim`` reads
a constant from anywhere else.  The ranges are documented in ``docs/evaluation.md``.
"""

from __future__ import annotations

import attrs

from koi.errors import InvalidInput
from koi.types.validators import fraction, non_negative, positive, positive_int

__all__ = ["LaunchConfig", "SamplingConfig", "SimConfig", "TruthConfig"]


def _range(_inst: object, attribute: attrs.Attribute[tuple[float, float]], value: object) -> None:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) for v in value)
        or not 0 <= value[0] <= value[1]
    ):
        raise InvalidInput(f"{attribute.name}: must be a (low, high) pair with 0 <= low <= high")


@attrs.frozen
class TruthConfig:
    """How the hidden truth differs from the surrogate's prior.

    Each factor multiplies one :class:`~koi.surrogate.replay.StepTime` component.  A relative
    error ``m`` is drawn uniformly from a ``*_error`` range; with probability ``slow_bias`` the
    truth is slower than the prior (factor ``1 + m``), otherwise faster (``1 / (1 + m)``) —
    rooflines are optimistic more often than not.  Collective communication over PCIe is drawn
    from ``pcie_comm_tp8``, a range of multipliers at TP=8, scaled by ``log2(tp) / 3`` toward 1
    at lower TP.
    """

    compute_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    memory_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    comm_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    pcie_comm_tp8: tuple[float, float] = attrs.field(default=(2.0, 4.5), validator=_range)
    bubble_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    overhead_error: tuple[float, float] = attrs.field(default=(0.10, 0.50), validator=_range)
    slow_bias: float = attrs.field(default=0.7, validator=fraction)
    step_noise_cv: float = attrs.field(default=0.05, validator=non_negative)
    driver_update_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)


@attrs.frozen
class LaunchConfig:
    """Launch delay and partial failures.

    A chain is up ``base_s + weights_gib / load_gib_s + warmup_s`` seconds after the plan is
    applied, times a log-normal jitter of CV ``jitter_cv``.  Each launched replica independently
    never materializes with probability ``fail_prob``, or runs slow (every step time multiplied
    by a factor drawn from ``slow_factor``) with probability ``slow_prob``.
    """

    base_s: float = attrs.field(default=45.0, validator=non_negative)
    load_gib_s: float = attrs.field(default=1.5, validator=positive)
    warmup_s: float = attrs.field(default=30.0, validator=non_negative)
    jitter_cv: float = attrs.field(default=0.2, validator=non_negative)
    fail_prob: float = attrs.field(default=0.03, validator=fraction)
    slow_prob: float = attrs.field(default=0.03, validator=fraction)
    slow_factor: tuple[float, float] = attrs.field(default=(1.5, 3.0), validator=_range)


@attrs.frozen
class SamplingConfig:
    """How much of each window is replayed request by request.

    A job whose window would carry more than ``max_requests_per_window`` requests is replayed on
    a sub-window of ``w = max(min_window_s, max_requests_per_window / rate)`` seconds at the TRUE
    arrival rate, and each replayed request stands for ``window / w`` real ones (see
    docs/evaluation.md, "Sampled windows").  Batch jobs keep ``batch_backlog`` times the number
    of request slots (``replicas × max_batch_size``) queued, so they stay saturated.  True step
    times are cached on a grid of relative spacing ``step_cache_resolution`` over batch shapes
    (see :class:`~koi.surrogate.replay.CachedStepModel`).
    """

    max_requests_per_window: int = attrs.field(default=250, validator=positive_int)
    min_window_s: float = attrs.field(default=10.0, validator=positive)
    batch_backlog: float = attrs.field(default=1.5, validator=positive)
    step_cache_resolution: float = attrs.field(default=0.1, validator=positive)


@attrs.frozen
class SimConfig:
    """Configuration of the simulated fleet (DESIGN §10.1).

    ``preemption_notice_prob`` is the chance that a spot preemption is announced one tick ahead
    (the pool shrinks in the snapshot first, the instance vanishes at the next tick); otherwise
    it vanishes without notice at a random moment of the window.  Preempted spot capacity
    returns to the pool after ``spot_recovery_s``.  A rank reports ``healthy=False`` when a
    replica is missing or (online) its p99 TTFT exceeds ``unhealthy_ttft_factor`` times the
    bound.  Reported SLO margins are clipped below at ``slo_margin_floor``.
    """

    truth: TruthConfig = attrs.field(factory=TruthConfig)
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    preemption_notice_prob: float = attrs.field(default=0.5, validator=fraction)
    spot_recovery_s: float = attrs.field(default=3600.0, validator=non_negative)
    unhealthy_ttft_factor: float = attrs.field(default=2.0, validator=positive)
    slo_margin_floor: float = -10.0
