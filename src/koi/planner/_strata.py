"""Where evidence is pooled: per stratum with the causal graph, globally without it.

The ``koi-nograph`` ablation turns the causal graph off: no strata, no mechanisms, no
exploration.  Corrections and residual histories are then pooled over the whole fleet.
"""

from __future__ import annotations

from koi.beliefs import Stratum, stratum_of
from koi.config import KoiConfig
from koi.types import Chain, ModelSpec

__all__ = ["FIRST_WINDOWS", "GLOBAL", "band_stratum", "stratum_for"]

GLOBAL = Stratum(gpu="all", model_class="all", engine="all")
#: Where the residuals of a job's first windows on a chain are pooled, over every stratum:
#: what the corrections a job borrows for a chain it never ran on get wrong (docs/planner.md,
#: "Candidate value (S5)").
FIRST_WINDOWS = Stratum(gpu="first-windows", model_class="all", engine="all")


def stratum_for(chain: Chain, model: ModelSpec, cfg: KoiConfig) -> Stratum:
    """The stratum whose evidence applies to ``chain``."""
    return stratum_of(chain, model) if cfg.planner.causal_graph else GLOBAL


def band_stratum(stratum: Stratum, *, untried: bool, cfg: KoiConfig) -> Stratum:
    """Whose residuals band a prediction on a chain in ``stratum``: the first windows' for a
    chain ``untried`` by the job (with the causal graph; the ablation pools everything), else
    the stratum's."""
    return FIRST_WINDOWS if untried and cfg.planner.causal_graph else stratum
