"""Scoring a plan (paper §2.2, §2.4; DESIGN §5).

Augmented Tchebycheff ``J_i`` with job-derived normalization, the deferral score, the four-part
switching cost, exploration counted once per plan, and the plan score ``Φ(P)``. Pure functions of
plain inputs: predictions are :class:`koi.types.Outcomes`, breach probabilities are floats,
exploration items are hashable keys with an uncertainty in [0, 1].
"""

from __future__ import annotations

from koi.scoring._config import ScoringConfig
from koi.scoring._explore import exploration_value, exploration_weights
from koi.scoring._plan import JobTerms, candidate_value, job_terms, plan_score
from koi.scoring._switch import SwitchCost, in_flight_requests, switching_cost
from koi.scoring._tchebycheff import Normalizer, deferral_score, gaps, ideal_point, tchebycheff

__all__ = [
    "JobTerms",
    "Normalizer",
    "ScoringConfig",
    "SwitchCost",
    "candidate_value",
    "deferral_score",
    "exploration_value",
    "exploration_weights",
    "gaps",
    "ideal_point",
    "in_flight_requests",
    "job_terms",
    "plan_score",
    "switching_cost",
    "tchebycheff",
]
