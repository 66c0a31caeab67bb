"""The invariance test that decides which edges to blame in Q2/Q3 (DESIGN §4.4).

For an edge ``parent -> child`` the question is whether the child's residual (observed minus
predicted, given its parents) has the same distribution in every environment (stratum) where
the edge was exercised.  Invariant residuals mean the edge transfers; environment-dependent
residuals mean the edge, as the surrogate models it, does not hold there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import attrs
import numpy as np

from koi.beliefs._strata import EdgeKey
from koi.beliefs._update import Verdict
from koi.errors import InvalidInput
from koi.types.validators import positive, positive_int

__all__ = [
    "InvarianceConfig",
    "InvarianceResult",
    "invariance_report",
    "invariance_test",
    "invariance_verdicts",
]


def _open_unit(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, float) and 0.0 < value < 1.0):
        raise InvalidInput(f"{attribute.name}: must be in (0, 1), got {value!r}")


@attrs.frozen
class InvarianceConfig:
    """Significance level, data minimums and the equivalence margin of the test.

    ``margin`` is the smallest between-environment shift that matters, in units of the
    within-environment residual standard deviation; ``power`` is the chance the test must
    have of seeing such a shift before a non-rejection counts as *accept*.
    """

    alpha: float = attrs.field(default=0.05, validator=_open_unit)
    power: float = attrs.field(default=0.80, validator=_open_unit)
    margin: float = attrs.field(default=1.5, validator=positive)
    min_samples: int = attrs.field(default=5, validator=positive_int)


@attrs.frozen
class InvarianceResult:
    """Verdict with the numbers behind it (p-values are 1.0 when a test was not run)."""

    verdict: Verdict
    p_location: float
    p_scale: float
    detectable_shift: float
    environments: int
    min_samples: int


def _groups(
    residuals_by_env: Mapping[str, Sequence[float]], cfg: InvarianceConfig
) -> list[np.ndarray]:
    groups = []
    for env in sorted(residuals_by_env):
        values = np.asarray(residuals_by_env[env], dtype=float)
        if values.ndim != 1:
            raise InvalidInput(f"residuals[{env!r}]: must be a flat sequence of numbers")
        if not np.all(np.isfinite(values)):
            raise InvalidInput(f"residuals[{env!r}]: must be finite, got NaN or infinity")
        if values.size >= cfg.min_samples:
            groups.append(values)
    return groups


def invariance_report(
    residuals_by_env: Mapping[str, Sequence[float]], *, cfg: InvarianceConfig | None = None
) -> InvarianceResult:
    r"""Test whether a child's residuals are invariant across environments.

    Environments with fewer than ``min_samples`` residuals are ignored.  With fewer than two
    environments left the verdict is *undecided*.  Otherwise two rank-robust tests run, each
    at level :math:`\alpha/2` (Bonferroni):

    * location — Kruskal–Wallis :math:`H` test that every environment has the same median;
    * scale — Brown–Forsythe test (Levene, median-centred) that every environment has the
      same spread.

    If either rejects, the verdict is *reject*.  Otherwise the verdict is *accept* only when
    the data could have seen a shift that matters: the shift detectable with power
    :math:`1-\beta` between the two smallest environments,

    .. math:: d = \left(z_{1-\alpha/4} + z_{1-\beta}\right)\sqrt{1/n_a + 1/n_b},

    in within-environment standard deviations, must not exceed ``margin``; else *undecided*.
    With the defaults (α = 0.05, power 0.8, margin 1.5) it decides from 9 residuals per
    environment.
    """
    cfg = InvarianceConfig() if cfg is None else cfg
    groups = _groups(residuals_by_env, cfg)
    sizes = sorted(g.size for g in groups)
    if len(groups) < 2:
        return InvarianceResult(Verdict.UNDECIDED, 1.0, 1.0, math.inf, len(groups), 0)
    z = NormalDist().inv_cdf
    shift = (z(1 - cfg.alpha / 4) + z(cfg.power)) * math.sqrt(1 / sizes[0] + 1 / sizes[1])
    decided = Verdict.ACCEPT if shift <= cfg.margin else Verdict.UNDECIDED

    spread = [float(np.ptp(g)) for g in groups]
    if max(spread) == 0.0:
        # No noise at all: any difference in level is a certain rejection.
        same = len({float(g[0]) for g in groups}) == 1
        verdict = decided if same else Verdict.REJECT
        return InvarianceResult(verdict, 1.0 if same else 0.0, 1.0, shift, len(groups), sizes[0])

    p_loc, p_scale = _p_values(groups)
    if min(p_loc, p_scale) < cfg.alpha / 2:
        return InvarianceResult(Verdict.REJECT, p_loc, p_scale, shift, len(groups), sizes[0])
    return InvarianceResult(decided, p_loc, p_scale, shift, len(groups), sizes[0])


def _p_values(groups: list[np.ndarray]) -> tuple[float, float]:
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            p_loc = float(stats.kruskal(*groups).pvalue)
        except ValueError:  # every value identical: no evidence of a location difference
            p_loc = 1.0
        deviations = [np.abs(g - np.median(g)) for g in groups]
        if max(float(d.max()) for d in deviations) == 0.0:
            p_scale = 1.0
        else:
            p_scale = float(stats.levene(*groups, center="median").pvalue)
    return (
        p_loc if math.isfinite(p_loc) else 1.0,
        p_scale if math.isfinite(p_scale) else 1.0,
    )


def invariance_test(
    residuals_by_env: Mapping[str, Sequence[float]],
    *,
    alpha: float | None = None,
    cfg: InvarianceConfig | None = None,
) -> Verdict:
    """The verdict of :func:`invariance_report` (``alpha`` overrides ``cfg.alpha``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> same = {e: rng.normal(0, 1, 15) for e in ("h100", "l40s")}
    >>> invariance_test(same).value
    'accept'
    >>> shifted = {"h100": rng.normal(0, 1, 15), "l40s": rng.normal(3, 1, 15)}
    >>> invariance_test(shifted).value
    'reject'
    """
    cfg = InvarianceConfig() if cfg is None else cfg
    if alpha is not None:
        cfg = attrs.evolve(cfg, alpha=float(alpha))
    return invariance_report(residuals_by_env, cfg=cfg).verdict


def invariance_verdicts(
    residuals_by_edge: Mapping[EdgeKey, Mapping[str, Sequence[float]]],
    *,
    cfg: InvarianceConfig | None = None,
) -> dict[EdgeKey, Verdict]:
    """One verdict per edge, each from the child's residuals in the edge's environments."""
    return {
        (edge[0], edge[1]): invariance_test(by_env, cfg=cfg)
        for edge, by_env in residuals_by_edge.items()
    }
