"""The plan score ``Φ(P)`` (paper §2.4) and the per-candidate value the selector maximises."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import attrs

from koi.errors import InvalidInput
from koi.scoring._config import ScoringConfig
from koi.scoring._explore import exploration_value
from koi.scoring._switch import SwitchCost
from koi.scoring._tchebycheff import Normalizer, tchebycheff
from koi.types import Job, Outcome, Outcomes
from koi.types.validators import finite, fraction, non_negative

__all__ = ["JobTerms", "candidate_value", "job_terms", "plan_score"]

_DEFAULT = ScoringConfig()


@attrs.frozen
class JobTerms:
    """One job's terms in ``Φ``: its score ``J_i``, breach probability and switching score."""

    j: float = attrs.field(validator=finite)
    breach_probability: float = attrs.field(default=0.0, validator=fraction)
    switch_score: float = attrs.field(default=0.0, validator=non_negative)

    def value(self, cfg: ScoringConfig = _DEFAULT, lam: float | None = None) -> float:
        """This job's term of ``Φ``: :func:`candidate_value` of these terms."""
        return candidate_value(self.j, self.breach_probability, self.switch_score, cfg=cfg, lam=lam)


def job_terms(
    job: Job,
    outcomes: Outcomes,
    *,
    scales: Normalizer,
    z_star: Mapping[Outcome, float],
    breach_probability: float = 0.0,
    switch: SwitchCost | None = None,
    cfg: ScoringConfig = _DEFAULT,
) -> JobTerms:
    """A candidate's terms: ``J_i`` of its predicted ``outcomes`` (augmented Tchebycheff
    against ``z_star`` with ``scales``), its breach probability, and its switching cost in
    score units (none for the keep ladder or a new placement)."""
    j = tchebycheff(job, outcomes, z_star=z_star, scales=scales, rho=cfg.rho, cfg=cfg)
    return JobTerms(j, breach_probability, switch.score(cfg) if switch is not None else 0.0)


def candidate_value(
    j: float,
    breach_probability: float,
    switch_score: float,
    *,
    cfg: ScoringConfig = _DEFAULT,
    lam: float | None = None,
) -> float:
    """``J_i − γ p_i − λ Switch_i``: the per-job part of ``Φ`` (a selector candidate's value)."""
    t = JobTerms(j, breach_probability, switch_score)
    lam_t = cfg.lambda_switch if lam is None else lam
    return t.j - cfg.gamma * t.breach_probability - lam_t * t.switch_score


def plan_score(
    job_terms: Iterable[JobTerms],
    covered: Iterable[Hashable],
    uncertainty: Mapping[Hashable, float],
    *,
    mechanisms_covered: Iterable[Hashable] = (),
    mechanism_uncertainty: Mapping[Hashable, float] | None = None,
    cfg: ScoringConfig = _DEFAULT,
    lam: float | None = None,
    beta: float | None = None,
) -> float:
    r"""Score of a whole plan.

    .. math::

        \Phi(P) = \sum_i \big[J_i - \gamma p_i - \lambda_t \mathrm{Switch}_i\big]
                  + \beta_t\,\mathrm{Expl}(P)

    γ and ω_m come from ``cfg``; λ_t and β_t default to ``cfg.lambda_switch`` / ``cfg.beta`` and
    are passed explicitly once the slow loop adapts them.
    """
    lam_t = cfg.lambda_switch if lam is None else lam
    beta_t = cfg.beta if beta is None else beta
    if lam_t < 0 or beta_t < 0:
        raise InvalidInput(f"lam, beta: must be >= 0, got {lam_t!r}, {beta_t!r}")
    per_job = sum(
        candidate_value(t.j, t.breach_probability, t.switch_score, cfg=cfg, lam=lam_t)
        for t in job_terms
    )
    expl = exploration_value(
        covered, uncertainty, mechanisms_covered, mechanism_uncertainty, cfg.omega_m
    )
    return per_job + beta_t * expl
