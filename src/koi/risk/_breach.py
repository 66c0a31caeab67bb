"""Breach probability of an SLO-constrained objective, and their combination."""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist

from koi.errors import InvalidInput
from koi.risk._band import RiskBand

__all__ = ["breach_probability", "combine_breach"]


def breach_probability(
    band: RiskBand, bound: float, *, upper_is_bad: bool, coverage: float = 0.90
) -> float:
    r"""Probability that the outcome falls on the wrong side of ``bound``.

    Assumption: the outcome is normal, centred at the band's midpoint, and the band is its
    central ``coverage`` interval (the level ε is calibrated to), so

    .. math::
        m = \tfrac{1}{2}(\mathrm{lower} + \mathrm{upper}),\quad
        s = \frac{\mathrm{upper} - \mathrm{lower}}{2 z_{(1+\mathrm{coverage})/2}},\quad
        p = 1 - \Phi\!\left(\frac{\mathrm{bound} - m}{s}\right)

    for a bound that must not be exceeded (latency) and :math:`\Phi((\mathrm{bound}-m)/s)` for
    one that must be reached (throughput).  ``p`` is monotone in the gap between the
    prediction and the bound.  A zero-width band gives 0 or 1 (0.5 exactly at the bound).

    Examples
    --------
    >>> b = RiskBand(lower=80.0, upper=120.0, center=100.0)
    >>> round(breach_probability(b, 120.0, upper_is_bad=True), 3)
    0.05
    """
    if not (math.isfinite(coverage) and 0.0 < coverage < 1.0):
        raise InvalidInput(f"coverage: must be in (0, 1), got {coverage!r}")
    if math.isnan(bound):
        raise InvalidInput("bound: must be a number, got NaN")
    mid = 0.5 * (band.lower + band.upper)
    gap = bound - mid if upper_is_bad else mid - bound  # > 0: safe side
    s = band.width / (2.0 * NormalDist().inv_cdf(0.5 + coverage / 2.0))
    if s <= 0.0:
        return 0.0 if gap > 0 else 1.0 if gap < 0 else 0.5
    if math.isinf(gap):
        return 0.0 if gap > 0 else 1.0
    return 0.5 * math.erfc(gap / (s * math.sqrt(2.0)))


def combine_breach(ps: Iterable[float]) -> float:
    r""":math:`p_i = 1 - \prod_j (1 - p_j)` over the job's SLO-constrained objectives.

    Treating the objectives as independent overestimates the risk when latency violations
    are positively correlated, which is the conservative side.
    """
    keep = 1.0
    for p in ps:
        if not (math.isfinite(p) and 0.0 <= p <= 1.0):
            raise InvalidInput(f"breach probability: must be in [0, 1], got {p!r}")
        keep *= 1.0 - p
    return 1.0 - keep
