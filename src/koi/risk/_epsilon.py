"""Calibration of the ambiguity radius ε toward a target coverage (paper §2.4–2.5)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from koi.errors import InvalidInput, KoiError
from koi.risk._config import RiskConfig
from koi.types.validators import non_negative

__all__ = ["EpsilonCalibrator", "calibrate_epsilon"]


def calibrate_epsilon(eps: float, covered: Iterable[bool], cfg: RiskConfig | None = None) -> float:
    r"""Move ε toward the target coverage, one step per realised outcome.

    .. math:: \epsilon \leftarrow \mathrm{clip}\bigl(\epsilon + \eta\,(\kappa - \mathbb 1[y \in
       \mathrm{band}]),\ \epsilon_{\min},\ \epsilon_{\max}\bigr)

    with κ the target coverage and η = ``eps_step``: a miss widens by η κ, a hit tightens by
    η (1 − κ), so ε is stationary exactly when the realised coverage is κ.  This is the
    adaptive-conformal update of Gibbs and Candès (2021) applied to ε; its long-run
    coverage error is bounded by (ε_max − ε_min + η) / (η T) after T outcomes.
    """
    cfg = RiskConfig() if cfg is None else cfg
    for hit in covered:
        eps = eps + cfg.eps_step * (cfg.target_coverage - (1.0 if hit else 0.0))
        eps = min(max(eps, cfg.eps_min), cfg.eps_max)
    return eps


@attrs.frozen
class EpsilonCalibrator:
    """ε with its realised coverage counts; :meth:`update` returns a new calibrator."""

    eps: float = attrs.field(converter=float, validator=non_negative)
    hits: int = 0
    outcomes: int = 0

    @classmethod
    def start(cls, cfg: RiskConfig | None = None) -> EpsilonCalibrator:
        cfg = RiskConfig() if cfg is None else cfg
        return cls(eps=cfg.eps0)

    @property
    def coverage(self) -> float:
        """Realised coverage so far (NaN before any outcome)."""
        return self.hits / self.outcomes if self.outcomes else float("nan")

    def update(self, covered: Iterable[bool], cfg: RiskConfig | None = None) -> EpsilonCalibrator:
        flags = [bool(c) for c in covered]
        return EpsilonCalibrator(
            eps=calibrate_epsilon(self.eps, flags, cfg),
            hits=self.hits + sum(flags),
            outcomes=self.outcomes + len(flags),
        )

    def to_data(self) -> dict[str, Any]:
        return {"eps": self.eps, "hits": self.hits, "outcomes": self.outcomes}

    @classmethod
    def from_data(cls, data: Any, *, where: str = "epsilon") -> EpsilonCalibrator:
        try:
            return cls(eps=data["eps"], hits=int(data["hits"]), outcomes=int(data["outcomes"]))
        except KeyError as exc:
            raise InvalidInput(f"{where}: required field {exc} missing") from None
        except (TypeError, ValueError, KoiError) as exc:
            raise InvalidInput(f"{where}: {exc}") from None
