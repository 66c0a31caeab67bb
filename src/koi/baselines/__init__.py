"""The planners koi is compared with (paper §3, DESIGN §10.4), and koi's ablations.

Every planner is a :class:`koi.sim.Policy`: it sees the same snapshots and telemetry as koi,
uses the same catalog, surrogate and scoring where its description allows, and every plan it
returns passes the host's safety checks (capacity C1, feasibility C2)::

    from koi.baselines import make_policy
    from koi.sim import run

    result = run("smoke", make_policy("edf", seed=0), seed=0)

Two references, never competitors and never ceilings, see the truth through the world they are
built with (``make_policy("milp-truth", world=build_world(scenario, seed=s))``): ``milp-truth``
(the rolling MILP with the true step model) and ``koi-truth`` (koi with perfect hardware
knowledge).
"""

from __future__ import annotations

from koi.baselines._common import Toolkit, safe_plan
from koi.baselines._config import BaselineConfig
from koi.baselines._evolution import Evolutionary
from koi.baselines._feedback import FeedbackMilp, correction_key
from koi.baselines._koi import KoiPolicy, koi_config
from koi.baselines._milp import RollingMilp
from koi.baselines._milp_truth import MilpTruth, TruthProfiles
from koi.baselines._perjob import PerJob
from koi.baselines._queue import BestFixed, QueueFirstFit, edf_key, fcfs_key
from koi.baselines._registry import (
    CONFIGURABLE,
    DEFAULT_PLANNERS,
    EXTRA_PLANNERS,
    LLM_PLANNERS,
    PLANNERS,
    REFERENCE,
    STOCHASTIC,
    make_policy,
)
from koi.baselines._thompson import ArmPosterior, Thompson

__all__ = [
    "CONFIGURABLE",
    "DEFAULT_PLANNERS",
    "EXTRA_PLANNERS",
    "LLM_PLANNERS",
    "PLANNERS",
    "REFERENCE",
    "STOCHASTIC",
    "ArmPosterior",
    "BaselineConfig",
    "BestFixed",
    "Evolutionary",
    "FeedbackMilp",
    "KoiPolicy",
    "MilpTruth",
    "PerJob",
    "QueueFirstFit",
    "RollingMilp",
    "Thompson",
    "Toolkit",
    "TruthProfiles",
    "correction_key",
    "edf_key",
    "fcfs_key",
    "koi_config",
    "make_policy",
    "safe_plan",
]
