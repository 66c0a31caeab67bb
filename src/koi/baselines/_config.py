"""Every constant of the baseline planners, in one frozen attrs class."""

from __future__ import annotations

import attrs

from koi.errors import InvalidInput
from koi.selector import SelectorConfig
from koi.types.validators import fraction, non_negative, positive, positive_int

__all__ = ["BaselineConfig"]


def _multipliers(
    _inst: object, attr: attrs.Attribute[tuple[float, ...]], value: tuple[float, ...]
) -> None:
    if not value or any(not (isinstance(m, int | float) and 1.0 <= m <= 8.0) for m in value):
        raise InvalidInput(f"{attr.name}: one or more factors in [1, 8], got {value!r}")


@attrs.frozen
class BaselineConfig:
    """Knobs of the competing planners (DESIGN §10.4).

    ``thompson_arms`` bounds each job's arm set (the cheapest screened configurations per GPU
    type first); ``thompson_prior`` is the pseudo-count the surrogate's verdict on an arm is
    worth in its Beta prior, ``thompson_cost_sd`` the prior standard deviation of its log cost
    per token and ``thompson_switch_margin`` the relative advantage a sampled arm needs over
    the running one before a job moves; ``thompson_replica_multipliers`` scale the surrogate's
    replica count, one arm per configuration and multiplier.  ``evo_population`` /
    ``evo_generations`` / ``evo_mutation`` / ``evo_elite`` shape the evolutionary search;
    ``evo_budget_per_job`` is its surrogate-call budget per job and tick (koi asks
    ``max_candidates × search_rounds`` proposals per job: the default matches koi's defaults of
    12 × 2).  ``max_candidates`` caps the proposer's short list for the per-job, rolling-MILP,
    evolutionary and ``milp-truth`` planners (koi's default); ``search_rounds`` is how often
    they may ask the proposer for a short list, each later round with its retry headroom
    (koi's default, 2).  ``selector`` configures the joint selector; the benchmark sets no
    wall-clock limit on it, so that a run depends only on (scenario, seed, planner).
    """

    max_candidates: int = attrs.field(default=12, validator=positive_int)
    search_rounds: int = attrs.field(default=2, validator=positive_int)
    selector: SelectorConfig = attrs.field(factory=lambda: SelectorConfig(time_limit_s=None))
    thompson_arms: int = attrs.field(default=8, validator=positive_int)
    thompson_prior: float = attrs.field(default=2.0, validator=positive)
    thompson_cost_sd: float = attrs.field(default=0.5, validator=positive)
    thompson_obs_sd: float = attrs.field(default=0.3, validator=positive)
    thompson_switch_margin: float = attrs.field(default=0.3, validator=non_negative)
    thompson_replica_multipliers: tuple[float, ...] = attrs.field(
        default=(1.0, 1.5, 2.0), converter=tuple, validator=_multipliers
    )
    evo_population: int = attrs.field(default=24, validator=positive_int)
    evo_generations: int = attrs.field(default=30, validator=positive_int)
    evo_mutation: float = attrs.field(default=0.15, validator=fraction)
    evo_elite: int = attrs.field(default=2, validator=positive_int)
    evo_budget_per_job: int = attrs.field(default=24, validator=positive_int)
