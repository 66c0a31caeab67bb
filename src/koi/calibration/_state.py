"""The slow loop as a frozen state and pure step functions (paper §2.5)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koi.calibration._config import CalibrationConfig
from koi.errors import InvalidInput
from koi.types import Outcome, Outcomes
from koi.types.validators import finite, non_negative, non_negative_int, to_tuple


def _finite_items(_inst: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    """Every element a finite number (the windows are rates in a checkpoint, never NaN)."""
    for k, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidInput(f"{attribute.name}[{k}]: must be a finite number, got {v!r}")


__all__ = ["CalibrationState", "TickSignals", "ideal_point_update", "regret", "swap_budget"]


@attrs.frozen
class TickSignals:
    """What one tick tells the slow loop.

    ``q1_rate`` is the fraction of decided evidence–mechanism pairs that fell in Q1 this tick
    (``None`` when nothing was decided); ``reconfig_rate`` the fraction of active jobs the
    committed plan reconfigured.
    """

    q1_rate: float | None
    reconfig_rate: float


@attrs.frozen
class CalibrationState:
    """β_t, λ_t and the windows they are computed from."""

    beta: float = attrs.field(validator=non_negative)
    lam: float = attrs.field(validator=non_negative)
    regret: float = attrs.field(default=0.0, validator=[finite, non_negative])
    ticks: int = attrs.field(default=0, validator=non_negative_int)
    q_window: tuple[float, ...] = attrs.field(
        default=(), converter=to_tuple, validator=_finite_items
    )
    reconfig_window: tuple[float, ...] = attrs.field(
        default=(), converter=to_tuple, validator=_finite_items
    )

    @classmethod
    def initial(cls, *, beta: float, lam: float) -> CalibrationState:
        return cls(beta=beta, lam=lam)

    def observe(self, signals: TickSignals, cfg: CalibrationConfig) -> CalibrationState:
        """Record one tick; on the slow schedule, move β and λ.

        .. math::
            s_t = \\frac{1}{W}\\sum_k \\max(0, q^\\star - q_k),\\quad
            \\beta_{t+1} = \\mathrm{clip}(\\beta_t e^{\\eta_\\beta (s_t - s^\\star)},
            \\beta_{\\min}, \\beta_{\\max})
        """
        q_window = self.q_window
        if signals.q1_rate is not None:
            q_window = (*q_window, signals.q1_rate)[-cfg.window :]
        reconfig_window = (*self.reconfig_window, signals.reconfig_rate)[-cfg.window :]
        ticks = self.ticks + 1
        s = regret(q_window, cfg.window) if q_window else self.regret
        beta, lam = self.beta, self.lam
        if ticks % cfg.every == 0:
            if q_window:
                beta = _clip(
                    beta * math.exp(cfg.eta_beta * (s - cfg.target_regret)),
                    cfg.beta_min,
                    cfg.beta_max,
                )
            rate = sum(reconfig_window) / len(reconfig_window)
            lam = _clip(
                lam * math.exp(cfg.eta_lambda * (rate - cfg.target_reconfig_rate)),
                cfg.lambda_min,
                cfg.lambda_max,
            )
        return CalibrationState(
            beta=beta,
            lam=lam,
            regret=s,
            ticks=ticks,
            q_window=q_window,
            reconfig_window=reconfig_window,
        )


def regret(q_window: Iterable[float], window: int, q_star: float = 1.0) -> float:
    """The regret signal ``s_t``: mean shortfall of the Q1 rate below ``q*`` over the window.

    Ticks of a window that are not yet filled count as zero regret, so the signal starts low and
    is not dominated by the first few decided evaluations.
    """
    qs = list(q_window)[-window:]
    return sum(max(0.0, q_star - q) for q in qs) / window


def swap_budget(
    regret_signal: float, active_jobs: int, cfg: CalibrationConfig, *, repairs: int = 0
) -> int:
    """``B_t``: more active jobs may be reconsidered when predictions are unreliable.

    The regret signal says it for the fleet; a job whose last window missed (or nearly missed)
    its target says it for itself, so each such job (``repairs``, at most ``active_jobs``)
    adds one to the budget: repairing a job the telemetry shows failing is not charged against
    the churn allowed among jobs that are fine.  Without it a share of a tenth let one change
    through per tick while five of ten jobs were overloaded (homo-12h, docs/benchmark.md).
    """
    if repairs < 0:
        raise InvalidInput(f"repairs: must be >= 0, got {repairs!r}")
    share = cfg.swap_min_share + (cfg.swap_max_share - cfg.swap_min_share) * regret_signal
    return max(cfg.swap_floor, round(share * active_jobs)) + min(repairs, active_jobs)


def ideal_point_update(
    z_star: Mapping[Outcome, float] | None,
    achieved: Outcomes | Mapping[Outcome, float],
    cfg: CalibrationConfig,
) -> dict[Outcome, float]:
    """Track the best outcome achieved, shifted by a margin Δ_j that preserves dominance.

    For a maximised objective ``z* = max y + Δ``, for a minimised one ``z* = min y - Δ``, with
    ``Δ_j = z_margin · |best_j|``.  Non-finite observations (an overloaded window) are ignored,
    and so are outcomes a mapping leaves out (telemetry that did not measure them).
    """
    out: dict[Outcome, float] = dict(z_star or {})
    for o in Outcome:
        y = achieved.get(o) if isinstance(achieved, Outcomes) else achieved.get(o, math.nan)
        if not math.isfinite(y):
            continue
        margin = cfg.z_margin * abs(y)
        candidate = y + margin if o.maximized else y - margin
        best = out.get(o)
        if best is None or (candidate > best if o.maximized else candidate < best):
            out[o] = candidate
    return out


def _clip(x: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, x))
