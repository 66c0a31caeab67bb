"""Candidate ladders, shared by the planner, the proposers and the baselines (DESIGN §1).

Screening and sizing (:class:`Screener`), placement on pools with room (:func:`place`), the
backward-query focus (:func:`job_focus`) and the built-in generator that combines them
(:class:`CandidateGenerator`; the ``koi.default_proposer`` plugin is a thin adapter over it).
"""

from __future__ import annotations

from koi.candidates._config import ProposerConfig
from koi.candidates._context import ProposalContext
from koi.candidates._explore import StratumUncertainty
from koi.candidates._focus import (
    SEARCHED,
    Focus,
    Steering,
    at_risk_outcomes,
    changed_decisions,
    job_focus,
    main_rank,
    objectives,
    searched,
)
from koi.candidates._generate import (
    MISSED_TARGET_RANK,
    CandidateGenerator,
    book_environments,
    neighbours,
)
from koi.candidates._placement import (
    PREEMPTION_PRICE_WEIGHT,
    fits_shape,
    free_gpus,
    hosts,
    place,
    risk_price,
)
from koi.candidates._routing import routing_matters, with_routing
from koi.candidates._screen import (
    Corrections,
    Option,
    Screener,
    SizedOption,
    largest_shapes,
    meets_target,
)
from koi.candidates._sizing import (
    RATE_STEP,
    ObservedRates,
    OutputLengths,
    observed_rates,
    replicas_for,
    with_observed,
    with_observed_output,
    with_observed_rate,
)

__all__ = [
    "MISSED_TARGET_RANK",
    "PREEMPTION_PRICE_WEIGHT",
    "RATE_STEP",
    "SEARCHED",
    "CandidateGenerator",
    "Corrections",
    "Focus",
    "ObservedRates",
    "Option",
    "OutputLengths",
    "ProposalContext",
    "ProposerConfig",
    "Screener",
    "SizedOption",
    "Steering",
    "StratumUncertainty",
    "at_risk_outcomes",
    "book_environments",
    "changed_decisions",
    "fits_shape",
    "free_gpus",
    "hosts",
    "job_focus",
    "largest_shapes",
    "main_rank",
    "meets_target",
    "neighbours",
    "objectives",
    "observed_rates",
    "place",
    "replicas_for",
    "risk_price",
    "routing_matters",
    "searched",
    "with_observed",
    "with_observed_output",
    "with_observed_rate",
    "with_routing",
]
