"""Every default of the risk package."""

from __future__ import annotations

from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types.validators import non_negative, positive, positive_int

__all__ = ["RiskConfig"]


def _open_unit(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not (isinstance(value, float) and 0.0 < value < 1.0):
        raise InvalidInput(f"{attribute.name}: must be in (0, 1), got {value!r}")


@attrs.frozen
class RiskConfig:
    """Band, prior, history and ε-calibration settings (DESIGN §5.2, §7).

    * ``lower_quantile``/``upper_quantile``: the paper's Q0.05 and Q0.95 of the residuals.
    * ``band_sigmas``: the 2 in ``2εσ̂``.
    * ``eps0`` and ``[eps_min, eps_max]``: ε starts at 0.3 (the paper reports radii 0.26–0.38)
      and is kept in [0, 3]; ``eps_step`` is the per-observation calibration rate.
    * ``target_coverage``: the share of outcomes the band should contain (default 0.90).
    * ``prior_width`` + ``prior_width_per_u``·U: the relative half-width of the prior band
      (5 % for a well-tested path, 50 % for an untested one); ``prior_strength`` is how many
      residuals the prior is worth when blended with a short history.
    * ``window``: residuals kept per (stratum, objective); ``prediction_floor`` keeps relative
      residuals finite for predictions near zero.
    """

    target_coverage: float = attrs.field(default=0.90, validator=_open_unit)
    lower_quantile: float = attrs.field(default=0.05, validator=_open_unit)
    upper_quantile: float = attrs.field(default=0.95, validator=_open_unit)
    band_sigmas: float = attrs.field(default=2.0, validator=non_negative)
    eps0: float = attrs.field(default=0.3, validator=non_negative)
    eps_min: float = attrs.field(default=0.0, validator=non_negative)
    eps_max: float = attrs.field(default=3.0, validator=positive)
    eps_step: float = attrs.field(default=0.05, validator=positive)
    prior_width: float = attrs.field(default=0.05, validator=non_negative)
    prior_width_per_u: float = attrs.field(default=0.45, validator=non_negative)
    prior_strength: float = attrs.field(default=10.0, validator=positive)
    window: int = attrs.field(default=36, validator=positive_int)
    prediction_floor: float = attrs.field(default=1e-6, validator=positive)

    def __attrs_post_init__(self) -> None:
        if not self.eps_min <= self.eps0 <= self.eps_max:
            msg = f"eps0: must be in [eps_min, eps_max] = [{self.eps_min}, {self.eps_max}]"
            raise InvalidInput(f"{msg}, got {self.eps0}")
        if self.lower_quantile >= self.upper_quantile:
            msg = f"lower_quantile: must be < upper_quantile ({self.upper_quantile})"
            raise InvalidInput(f"{msg}, got {self.lower_quantile}")
        # The band's prior width divides by the upper quantile's normal score: it needs a side
        # above the median (and the lower quantile one below it).
        if self.upper_quantile <= 0.5:
            raise InvalidInput(f"upper_quantile: must be > 0.5, got {self.upper_quantile}")
        if self.lower_quantile >= 0.5:
            raise InvalidInput(f"lower_quantile: must be < 0.5, got {self.lower_quantile}")
