"""Defaults of the slow calibration loop (paper §2.5)."""

from __future__ import annotations

import attrs

from koi.types.validators import fraction, non_negative, positive, positive_int

__all__ = ["CalibrationConfig"]


@attrs.frozen
class CalibrationConfig:
    """Every knob of the slow loop.

    The initial β and λ are the scoring layer's ``beta`` and ``lambda_switch``.
    ``window`` is the paper's ``W`` (ticks in the rolling Q1-rate window); ``every`` how many
    ticks pass between slow-loop updates.  ``target_regret`` is ``s*`` and ``eta_beta`` is
    ``η_β``.  The swap budget ``B_t`` moves linearly between ``swap_min_share`` and
    ``swap_max_share`` of the active jobs as regret goes from 0 to 1.  ``λ_t`` follows the observed
    reconfiguration rate: it grows by ``exp(η_λ (rate - target_reconfig_rate))``.
    ``z_margin`` is ``Δ_j`` as a fraction of the best achieved value.
    """

    window: int = attrs.field(default=6, validator=positive_int)
    every: int = attrs.field(default=2, validator=positive_int)
    beta_min: float = attrs.field(default=0.02, validator=non_negative)
    beta_max: float = attrs.field(default=2.0, validator=positive)
    target_regret: float = attrs.field(default=0.35, validator=fraction)
    eta_beta: float = attrs.field(default=1.5, validator=non_negative)
    swap_min_share: float = attrs.field(default=0.1, validator=fraction)
    swap_max_share: float = attrs.field(default=0.5, validator=fraction)
    swap_floor: int = attrs.field(default=1, validator=positive_int)
    lambda_min: float = attrs.field(default=0.25, validator=non_negative)
    lambda_max: float = attrs.field(default=8.0, validator=positive)
    target_reconfig_rate: float = attrs.field(default=0.1, validator=fraction)
    eta_lambda: float = attrs.field(default=4.0, validator=non_negative)
    z_margin: float = attrs.field(default=0.05, validator=fraction)
