"""``histogram_quantile`` as PromQL computes it, plus the bucket the quantile fell in.

PromQL's ``histogram_quantile(q, sum by (le) (rate(x_bucket[w])))`` interpolates linearly
inside the bucket that holds the ``q``-quantile.  The interpolation is a guess: the true
quantile can be anywhere in that bucket, so :func:`histogram_quantile` also returns the
bucket's bounds.  The arithmetic follows Prometheus' ``bucketQuantile`` (first bucket starts at
0, a quantile in the ``+Inf`` bucket is the largest finite bound, non-monotonic cumulative
counts are raised to monotonic), so the value equals what Prometheus itself answers; the tests
check this against a real Prometheus.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

__all__ = ["QuantileEstimate", "histogram_quantile"]


@attrs.frozen
class QuantileEstimate:
    """A quantile read from a histogram: ``value`` (PromQL's interpolation) lies in
    ``[low, high]``, the bucket that holds the quantile; ``high`` is ``inf`` for the last one.

    .. versionadded:: 0.1
    """

    value: float
    low: float
    high: float
    count: float

    def scaled(self, factor: float) -> QuantileEstimate:
        """The same estimate in other units (seconds -> milliseconds: ``factor=1000``)."""
        return QuantileEstimate(
            self.value * factor, self.low * factor, self.high * factor, self.count
        )

    @property
    def width(self) -> float:
        return self.high - self.low


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> QuantileEstimate | None:
    """The ``q``-quantile of a histogram given as ``(le, cumulative count or rate)`` pairs.

    Returns ``None`` where PromQL returns NaN: no ``+Inf`` bucket, fewer than two buckets,
    no observations, a NaN count, or ``q`` outside ``[0, 1]``.

    Examples
    --------
    >>> est = histogram_quantile(0.5, [(0.1, 2.0), (0.2, 6.0), (math.inf, 8.0)])
    >>> round(est.value, 3), est.low, est.high
    (0.15, 0.1, 0.2)
    """
    if not 0.0 <= q <= 1.0:
        return None
    merged: dict[float, float] = {}
    for le, count in buckets:
        if math.isnan(le) or math.isnan(count):
            return None
        merged[le] = merged.get(le, 0.0) + count  # the same bound twice: Prometheus adds them
    bounds = sorted(merged)
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    counts = [merged[b] for b in bounds]
    for i in range(1, len(counts)):  # rates of separately scraped buckets can dip: smooth up
        counts[i] = max(counts[i], counts[i - 1])
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds) - 1:  # in the +Inf bucket: PromQL answers the largest finite bound
        return QuantileEstimate(bounds[-2], bounds[-2], math.inf, total)
    if b == 0 and bounds[0] <= 0:
        return QuantileEstimate(bounds[0], bounds[0], bounds[0], total)
    start = 0.0 if b == 0 else bounds[b - 1]
    end = bounds[b]
    count = counts[b]
    if b > 0:
        count -= counts[b - 1]
        rank -= counts[b - 1]
    value = start + (end - start) * (rank / count) if count > 0 else end
    return QuantileEstimate(value, start, end, total)
