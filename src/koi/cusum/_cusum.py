"""The two-sided CUSUM step and the quadrant classification (paper §2.3)."""

from __future__ import annotations

import math

import attrs

from koi.beliefs import Quadrant
from koi.cusum._config import CusumConfig
from koi.errors import InvalidInput

__all__ = ["CusumState", "classify", "cusum_step"]


@attrs.frozen
class CusumState:
    """Statistics after ``n`` residuals, in units of σ̂.

    ``alarm`` is true on the step that crossed the threshold (``direction`` +1 for
    observations above the prediction, -1 below); the next step restarts from zero.
    ``alarms`` counts every alarm so far.
    """

    s_plus: float = 0.0
    s_minus: float = 0.0
    n: int = 0
    alarm: bool = False
    direction: int = 0
    alarms: int = 0


def cusum_step(
    state: CusumState, residual: float, sigma: float, cfg: CusumConfig | None = None
) -> CusumState:
    r"""One step of the two-sided CUSUM on a residual ``r = observed - predicted``.

    With :math:`z = \mathrm{clip}(r / \hat\sigma, -c, c)`:

    .. math::
        S^+_k = \max(0, S^+_{k-1} + z - k), \qquad S^-_k = \min(0, S^-_{k-1} + z + k),

    and an alarm when :math:`S^+_k > h` or :math:`S^-_k < -h`.  For a constant σ̂ and no
    clipping this is the paper's form with δ = kσ̂ and threshold hσ̂.  After an alarm the
    sums restart from zero.

    References
    ----------
    E. S. Page, "Continuous inspection schemes", Biometrika 41 (1954).
    """
    cfg = CusumConfig() if cfg is None else cfg
    if not math.isfinite(residual):
        raise InvalidInput(f"residual: must be finite, got {residual!r}")
    if not (math.isfinite(sigma) and sigma > 0):
        raise InvalidInput(f"sigma: must be a finite number > 0, got {sigma!r}")
    s_plus, s_minus = (0.0, 0.0) if state.alarm else (state.s_plus, state.s_minus)
    z = min(max(residual / sigma, -cfg.clip), cfg.clip)
    s_plus = max(0.0, s_plus + z - cfg.k)
    s_minus = min(0.0, s_minus + z + cfg.k)
    direction = 1 if s_plus > cfg.h else -1 if s_minus < -cfg.h else 0
    return CusumState(
        s_plus=s_plus,
        s_minus=s_minus,
        n=state.n + 1,
        alarm=direction != 0,
        direction=direction,
        alarms=state.alarms + (direction != 0),
    )


def classify(mediators_diverged: bool, outcomes_diverged: bool) -> Quadrant:
    """Quadrant of a mechanism evaluation from its mediator and outcome detectors.

    ===========  ===========  ========
    mediators    outcomes     quadrant
    ===========  ===========  ========
    match        match        Q1
    match        diverge      Q2
    diverge      match        Q3
    diverge      diverge      Q4
    ===========  ===========  ========
    """
    if mediators_diverged:
        return Quadrant.Q4 if outcomes_diverged else Quadrant.Q3
    return Quadrant.Q2 if outcomes_diverged else Quadrant.Q1
