"""Beliefs about causal edges: Beta states per stratum, quadrant updates, invariance test.

Paper §2.3, DESIGN §4.2 and §4.4.  Every function is pure; stores and beliefs are frozen.
"""

from __future__ import annotations

from koi.beliefs._beta import Beta, uncertainty
from koi.beliefs._config import BeliefConfig
from koi.beliefs._invariance import (
    InvarianceConfig,
    InvarianceResult,
    invariance_report,
    invariance_test,
    invariance_verdicts,
)
from koi.beliefs._store import EvidenceStore
from koi.beliefs._strata import EdgeKey, Stratum, stratum_of
from koi.beliefs._update import (
    Quadrant,
    UpdateTable,
    Verdict,
    combined_verdict,
    update_for_evaluation,
    update_mechanism,
)

__all__ = [
    "BeliefConfig",
    "Beta",
    "EdgeKey",
    "EvidenceStore",
    "InvarianceConfig",
    "InvarianceResult",
    "Quadrant",
    "Stratum",
    "UpdateTable",
    "Verdict",
    "combined_verdict",
    "invariance_report",
    "invariance_test",
    "invariance_verdicts",
    "stratum_of",
    "uncertainty",
    "update_for_evaluation",
    "update_mechanism",
]
