"""Two-sided CUSUM on prediction residuals and the four-quadrant classification.

Paper §2.3, DESIGN §4.4.  ``cusum_step`` is a pure function of a frozen state;
``Detector`` adds the residual history from which σ̂ is estimated.
"""

from __future__ import annotations

from koi.beliefs import Quadrant
from koi.cusum._config import CusumConfig
from koi.cusum._cusum import CusumState, classify, cusum_step
from koi.cusum._detector import Detector
from koi.cusum._sigma import robust_sigma

__all__ = [
    "CusumConfig",
    "CusumState",
    "Detector",
    "Quadrant",
    "classify",
    "cusum_step",
    "robust_sigma",
]
