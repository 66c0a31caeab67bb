"""The DRO band around a prediction (paper §2.4, DESIGN §5.2)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import attrs
import numpy as np

from koi.errors import InvalidInput
from koi.risk._config import RiskConfig
from koi.types.validators import finite

__all__ = ["RiskBand", "band"]


@attrs.frozen
class RiskBand:
    """``[lower, upper]`` for an outcome whose point prediction is ``center``.

    The band need not contain ``center``: a surrogate that always predicts too low has
    residual quantiles above zero.
    """

    lower: float = attrs.field(converter=float, validator=finite)
    upper: float = attrs.field(converter=float, validator=finite)
    center: float = attrs.field(converter=float, validator=finite)

    def __attrs_post_init__(self) -> None:
        if self.lower > self.upper:
            raise InvalidInput(f"lower: must be <= upper ({self.upper}), got {self.lower}")

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def contains(self, value: float) -> bool:
        return self.lower <= value <= self.upper


def _check_unit(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidInput(f"{name}: must be in [0, 1], got {value!r}")


def band(
    prediction: float,
    residuals: Sequence[float],
    eps: float,
    *,
    prior_uncertainty: float = 1.0,
    cfg: RiskConfig | None = None,
) -> RiskBand:
    r"""The band ``[lower, upper]`` around ``prediction`` from relative residuals.

    .. math::
        \mathrm{upper} = \hat y + |\hat y|\,\bigl(Q_{0.95}(r) + 2\epsilon\hat\sigma\bigr),\qquad
        \mathrm{lower} = \hat y + |\hat y|\,\bigl(Q_{0.05}(r) - 2\epsilon\hat\sigma\bigr)

    where ``r`` are relative residuals (:func:`relative_residual`) and σ̂ their standard
    deviation.  With a short history the quantiles and σ̂ are blended with a prior band
    ``±w`` (``w = prior_width + prior_width_per_u · U``, σ_prior = w / z₀.₉₅), the prior
    weighing ``n₀ / (n₀ + n)`` with ``n₀ = prior_strength``; with no history the band is the
    prior alone, so it widens with the uncertainty ``U`` of the edges on the candidate's
    paths.
    """
    cfg = RiskConfig() if cfg is None else cfg
    if not math.isfinite(prediction):
        raise InvalidInput(f"prediction: must be finite, got {prediction!r}")
    if not (math.isfinite(eps) and eps >= 0):
        raise InvalidInput(f"eps: must be a finite number >= 0, got {eps!r}")
    _check_unit("prior_uncertainty", prior_uncertainty)
    r = np.asarray(residuals, dtype=float)
    if r.ndim != 1 or not np.all(np.isfinite(r)):
        raise InvalidInput("residuals: must be a flat sequence of finite numbers")

    half = cfg.prior_width + cfg.prior_width_per_u * prior_uncertainty
    z = NormalDist().inv_cdf(cfg.upper_quantile)
    q_lo, q_hi, sigma = -half, half, half / z
    if r.size:
        w = cfg.prior_strength / (cfg.prior_strength + r.size)
        e_lo, e_hi = (float(q) for q in np.quantile(r, [cfg.lower_quantile, cfg.upper_quantile]))
        e_sigma = float(np.std(r, ddof=1)) if r.size > 1 else 0.0
        q_lo = w * q_lo + (1 - w) * e_lo
        q_hi = w * q_hi + (1 - w) * e_hi
        sigma = w * sigma + (1 - w) * e_sigma
    scale = abs(prediction)
    inflate = cfg.band_sigmas * eps * sigma
    return RiskBand(
        lower=prediction + scale * (q_lo - inflate),
        upper=prediction + scale * (q_hi + inflate),
        center=prediction,
    )
