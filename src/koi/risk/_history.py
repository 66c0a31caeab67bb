"""Bounded histories of relative residuals per (stratum, objective)."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from koi.beliefs import Stratum
from koi.errors import InvalidInput, KoiError
from koi.types.validators import positive_int

__all__ = ["ResidualHistory", "relative_residual"]

HistoryKey = tuple[Stratum, str]


def relative_residual(observed: float, predicted: float, floor: float = 1e-6) -> float:
    r"""Relative residual :math:`r = (y_{obs} - \hat y) / \max(|\hat y|, \mathrm{floor})`.

    Relative, so that one history serves a 1B model at 20 ms and a 405B model at 2 s, and so
    that the band scales with the prediction.
    """
    if not (math.isfinite(observed) and math.isfinite(predicted)):
        raise InvalidInput(
            f"residual: observed and predicted must be finite, got {observed}, {predicted}"
        )
    return (observed - predicted) / max(abs(predicted), floor)


def _objective(value: object) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, str) and value:
        return value
    raise InvalidInput(f"objective: must be an Outcome, Mediator or name, got {value!r}")


def _freeze(
    value: Mapping[HistoryKey, tuple[float, ...]],
) -> Mapping[HistoryKey, tuple[float, ...]]:
    return MappingProxyType({k: tuple(v) for k, v in value.items()})


@attrs.frozen
class ResidualHistory:
    """The last ``window`` relative residuals for each (stratum, objective).

    Objectives are named by their value (``Outcome.TTFT`` -> ``"p99_ttft_ms"``), so
    mediators can be kept here too.  Every ``add`` returns a new history.
    """

    window: int = attrs.field(default=200, validator=positive_int)
    _series: Mapping[HistoryKey, tuple[float, ...]] = attrs.field(
        factory=dict, converter=_freeze, alias="series", eq=False, hash=False
    )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResidualHistory):
            return NotImplemented
        return self.window == other.window and dict(self._series) == dict(other._series)

    def __hash__(self) -> int:
        return hash((self.window, frozenset(self._series.items())))

    def __len__(self) -> int:
        return len(self._series)

    def keys(self) -> tuple[HistoryKey, ...]:
        return tuple(sorted(self._series))

    def get(self, stratum: Stratum, objective: object) -> tuple[float, ...]:
        """Residuals for one key, oldest first (empty when never observed)."""
        return self._series.get((stratum, _objective(objective)), ())

    def add_residual(self, stratum: Stratum, objective: object, residual: float) -> ResidualHistory:
        return self.add_residuals([(stratum, objective, residual)])

    def add_residuals(self, items: Iterable[tuple[Stratum, object, float]]) -> ResidualHistory:
        """Append many residuals, in order, in one copy of the history (a tick's worth)."""
        series = dict(self._series)
        for stratum, objective, residual in items:
            if not math.isfinite(residual):
                raise InvalidInput(f"residual: must be finite, got {residual!r}")
            key = (stratum, _objective(objective))
            series[key] = (*series.get(key, ()), float(residual))[-self.window :]
        return ResidualHistory(self.window, series)

    def forget(self, keys: Iterable[tuple[Stratum, object]]) -> ResidualHistory:
        """Drop the residuals of these (stratum, objective) pairs (the world changed)."""
        drop = {(s, _objective(o)) for s, o in keys}
        if not drop & self._series.keys():
            return self
        kept = {k: v for k, v in self._series.items() if k not in drop}
        return ResidualHistory(self.window, kept)

    def add(
        self,
        stratum: Stratum,
        objective: object,
        observed: float,
        predicted: float,
        *,
        floor: float = 1e-6,
    ) -> ResidualHistory:
        """Record the :func:`relative_residual` of one observation against its prediction."""
        return self.add_residual(stratum, objective, relative_residual(observed, predicted, floor))

    def to_data(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "series": [
                {"stratum": s.key, "objective": o, "residuals": list(self._series[(s, o)])}
                for s, o in self.keys()
            ],
        }

    @classmethod
    def from_data(cls, data: Any, *, where: str = "residual_history") -> ResidualHistory:
        try:
            series: dict[HistoryKey, tuple[float, ...]] = {}
            for i, item in enumerate(data["series"]):
                key = (Stratum.from_key(item["stratum"]), _objective(item["objective"]))
                values = tuple(float(r) for r in item["residuals"])
                if not all(math.isfinite(r) for r in values):
                    raise InvalidInput(f"series[{i}]: residuals must be finite")
                series[key] = values
            return cls(data["window"], series)
        except KeyError as exc:
            raise InvalidInput(f"{where}: required field {exc} missing") from None
        except (TypeError, ValueError, KoiError) as exc:
            raise InvalidInput(f"{where}: {exc}") from None
