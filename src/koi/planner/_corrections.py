"""Residual corrections (DESIGN §4.5.1): per stratum, what the surrogate gets wrong.

Each observation of a deployed rank implies a correction factor for its stratum: the factor in
force when the prediction was made times ``observed / predicted``.  The correction is the median
of the implied factors since the last reset, so it converges in a tick or two, shrugs off
outliers, and does not feed back on itself.  The decode step time is corrected from TPOT (it
generalises across replica counts and batch sizes, because the surrogate re-derives queueing
from it); p99 TTFT, which mixes prefill with queueing, and the mediators are corrected
directly.  CUSUM divergence resets a variable so that
stale evidence does not linger after the world changed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

import attrs

from koi.config import CorrectionConfig
from koi.types import Mediator

__all__ = [
    "DECODE_TIME",
    "CorrectionEntry",
    "CorrectionStore",
]

DECODE_TIME = "decode_time"

# Additive floors keep ratios of near-zero quantities (an empty queue) from exploding.
_FLOORS: Mapping[str, float] = {
    Mediator.QUEUE_DEPTH.value: 0.5,
    Mediator.MEAN_BATCH.value: 0.5,
    Mediator.PREEMPTION_RATE.value: 0.05,
}
_FRACTION_FLOOR = 0.02


@attrs.frozen
class CorrectionEntry:
    """Implied factors for one (stratum, variable)."""

    stratum: str
    variable: str
    factors: tuple[float, ...]


def floor_of(variable: str) -> float:
    """Additive floor for the ratio of ``variable``."""
    if variable == DECODE_TIME or variable.startswith("p99_"):
        return 0.0
    return _FLOORS.get(variable, _FRACTION_FLOOR)


@attrs.frozen
class CorrectionStore:
    """Immutable map (stratum, variable) -> recent implied factors."""

    entries: tuple[CorrectionEntry, ...] = ()
    _index: Mapping[tuple[str, str], tuple[float, ...]] = attrs.field(
        init=False, eq=False, hash=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        index = {(e.stratum, e.variable): e.factors for e in self.entries}
        object.__setattr__(self, "_index", index)

    def factor(self, stratum: str, variable: str, cfg: CorrectionConfig) -> float | None:
        """The current correction, or ``None`` while there is too little evidence."""
        factors = self._index.get((stratum, variable), ())
        if len(factors) < cfg.min_samples:
            return None
        return statistics.median(factors)

    def samples(self, stratum: str, variable: str) -> int:
        return len(self._index.get((stratum, variable), ()))

    def record(
        self,
        items: Iterable[tuple[str, str, float, float, float]],
        cfg: CorrectionConfig,
    ) -> CorrectionStore:
        """Add ``(stratum, variable, factor_in_force, observed, predicted)`` samples."""
        index = dict(self._index)
        for stratum, variable, in_force, observed, predicted in items:
            floor = floor_of(variable)
            if not (math.isfinite(observed) and math.isfinite(predicted)):
                continue
            if predicted + floor <= 0 or observed + floor <= 0:
                continue
            implied = in_force * (observed + floor) / (predicted + floor)
            implied = min(cfg.max_factor, max(1.0 / cfg.max_factor, implied))
            key = (stratum, variable)
            index[key] = (*index.get(key, ()), implied)[-cfg.window :]
        return CorrectionStore._from_index(index)

    def reset(self, keys: Iterable[tuple[str, str]]) -> CorrectionStore:
        """Forget the evidence of these (stratum, variable) pairs."""
        drop = set(keys)
        if not drop & self._index.keys():
            return self
        return CorrectionStore._from_index({k: v for k, v in self._index.items() if k not in drop})

    @classmethod
    def _from_index(cls, index: Mapping[tuple[str, str], tuple[float, ...]]) -> CorrectionStore:
        return cls(
            tuple(
                CorrectionEntry(stratum=s, variable=v, factors=f)
                for (s, v), f in sorted(index.items())
            )
        )
