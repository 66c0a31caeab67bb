"""Risk: residual histories, the DRO band, breach probability and ε calibration.

Paper §2.4, DESIGN §5.2 and §7.  Residuals are relative: ``(observed - predicted) /
max(|predicted|, floor)``.
"""

from __future__ import annotations

from koi.risk._band import RiskBand, band
from koi.risk._breach import breach_probability, combine_breach
from koi.risk._config import RiskConfig
from koi.risk._epsilon import EpsilonCalibrator, calibrate_epsilon
from koi.risk._history import ResidualHistory, relative_residual

__all__ = [
    "EpsilonCalibrator",
    "ResidualHistory",
    "RiskBand",
    "RiskConfig",
    "band",
    "breach_probability",
    "calibrate_epsilon",
    "combine_breach",
    "relative_residual",
]
