"""A detector that keeps its residual history and estimates σ̂ from it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from koi.cusum._config import CusumConfig
from koi.cusum._cusum import CusumState, cusum_step
from koi.cusum._sigma import robust_sigma
from koi.errors import InvalidInput, KoiError

__all__ = ["Detector"]


@attrs.frozen
class Detector:
    """CUSUM state plus a bounded residual window; :meth:`step` returns a new detector.

    σ̂ for each residual comes from the residuals *before* it (``prior_sigma`` until
    ``min_history`` exist, never below ``sigma_floor``), so a shift does not hide itself by
    inflating its own scale.  ``diverged`` latches on the first alarm until :meth:`reset`.
    """

    cfg: CusumConfig = attrs.field(factory=CusumConfig)
    state: CusumState = attrs.field(factory=CusumState)
    history: tuple[float, ...] = ()
    diverged: bool = False

    @property
    def sigma(self) -> float:
        """σ̂ the next residual will be standardised by."""
        if len(self.history) < self.cfg.min_history:
            return max(self.cfg.prior_sigma, self.cfg.sigma_floor)
        return robust_sigma(self.history, self.cfg.sigma_floor)

    def step(self, residual: float) -> Detector:
        """Feed one residual ``observed - predicted``."""
        state = cusum_step(self.state, residual, self.sigma, self.cfg)
        history = (*self.history, float(residual))[-self.cfg.window :]
        return attrs.evolve(
            self, state=state, history=history, diverged=self.diverged or state.alarm
        )

    def feed(self, residuals: Iterable[float]) -> Detector:
        """Feed several residuals in order."""
        detector = self
        for r in residuals:
            detector = detector.step(r)
        return detector

    def reset(self, *, keep_history: bool = False) -> Detector:
        """Clear the statistics and the divergence latch (the world changed; start over)."""
        return Detector(cfg=self.cfg, history=self.history if keep_history else ())

    def to_data(self) -> dict[str, Any]:
        s = self.state
        return {
            "s_plus": s.s_plus,
            "s_minus": s.s_minus,
            "n": s.n,
            "alarm": s.alarm,
            "direction": s.direction,
            "alarms": s.alarms,
            "history": list(self.history),
            "diverged": self.diverged,
        }

    @classmethod
    def from_data(
        cls, data: Any, cfg: CusumConfig | None = None, *, where: str = "detector"
    ) -> Detector:
        try:
            state = CusumState(
                s_plus=float(data["s_plus"]),
                s_minus=float(data["s_minus"]),
                n=int(data["n"]),
                alarm=bool(data["alarm"]),
                direction=int(data["direction"]),
                alarms=int(data["alarms"]),
            )
            history = tuple(float(r) for r in data["history"])
            return cls(
                cfg=CusumConfig() if cfg is None else cfg,
                state=state,
                history=history,
                diverged=bool(data["diverged"]),
            )
        except KeyError as exc:
            raise InvalidInput(f"{where}: required field {exc} missing") from None
        except (TypeError, ValueError, KoiError) as exc:
            raise InvalidInput(f"{where}: {exc}") from None
