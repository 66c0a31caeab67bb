"""Where evidence is pooled: per stratum with the causal graph, globally without it.

The ``koi-nograph`` ablation turns the causal graph off: no strata, no mechanisms, no
exploration.  Corrections and residual histories are then pooled over the whole fleet.
"""

from __future__ import annotations

from koi.beliefs import Stratum, stratum_of
from koi.config import KoiConfig
from koi.types import Chain, ModelSpec

__all__ = ["GLOBAL", "stratum_for"]

GLOBAL = Stratum(gpu="all", model_class="all", engine="all")


def stratum_for(chain: Chain, model: ModelSpec, cfg: KoiConfig) -> Stratum:
    """The stratum whose evidence applies to ``chain``."""
    return stratum_of(chain, model) if cfg.planner.causal_graph else GLOBAL
