"""Every default of the CUSUM detector."""

from __future__ import annotations

import attrs

from koi.types.validators import positive, positive_int

__all__ = ["CusumConfig"]


@attrs.frozen
class CusumConfig:
    """Slack ``k``, threshold ``h`` and clip ``c`` in units of σ̂, and σ̂'s estimation.

    * ``k = 0.5``, ``h = 4.0``: the paper's δ = 0.5σ̂ and h = 4σ̂ (tuned to catch a 1σ̂
      shift); the slow loop may adapt both.
    * ``clip = 1.75``: each standardised residual is winsorised to ±1.75 before it is summed
      (Huber).  Without it a single 5σ̂ outlier adds 4.5 > h and alarms on its own, and the
      two-sided in-control run length at k = 0.5, h = 4 is only ≈ 170 samples (one false
      alarm per 170); with it the run length is ≈ 390 for a known σ and ≈ 300 with σ̂
      re-estimated from a 128-residual window, while a 1σ shift is still caught in ≈ 10.
    * ``sigma_floor``: σ̂ never goes below it, so a near-perfect history does not turn
      every tiny deviation into an alarm.  Residuals in koi are relative, so 0.01 is 1 %.
    * ``prior_sigma``: σ̂ used until ``min_history`` residuals exist (a surrogate good to
      about ±10 % is "in control" on its first tick).
    * ``window``: residuals kept to estimate σ̂.
    """

    k: float = attrs.field(default=0.5, validator=positive)
    h: float = attrs.field(default=4.0, validator=positive)
    clip: float = attrs.field(default=1.75, validator=positive)
    sigma_floor: float = attrs.field(default=0.01, validator=positive)
    prior_sigma: float = attrs.field(default=0.10, validator=positive)
    min_history: int = attrs.field(default=8, validator=positive_int)
    window: int = attrs.field(default=128, validator=positive_int)
