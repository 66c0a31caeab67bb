"""Self-calibration: the slow loop that adapts β_t, B_t, λ_t and z* (paper §2.5).

ε_t (the DRO radius) is calibrated by :mod:`koi.risk` from realized coverage and CUSUM scales
follow the residual histories kept in :mod:`koi.cusum`; the planner runs all of them on this
loop's schedule.
"""

from __future__ import annotations

from koi.calibration._config import CalibrationConfig
from koi.calibration._state import (
    CalibrationState,
    TickSignals,
    ideal_point_update,
    regret,
    swap_budget,
)

__all__ = [
    "CalibrationConfig",
    "CalibrationState",
    "TickSignals",
    "ideal_point_update",
    "regret",
    "swap_budget",
]
