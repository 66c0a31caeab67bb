"""Frozen value types of koi (DESIGN §2) and their JSON round-trip."""

from __future__ import annotations

from koi.types._deploy import KV_CACHE_DTYPES, Chain, Config, Ladder, Rank
from koi.types._enums import (
    ActionKind,
    AdmissionPolicy,
    Arrival,
    Engine,
    JobClass,
    LinkKind,
    Market,
    Mediator,
    Outcome,
    Quant,
    Routing,
    to_market,
)
from koi.types._hardware import Environment, GpuSpec, Pool
from koi.types._model import ModelSpec
from koi.types._serde import from_data, from_json, parse_json, to_data, to_json
from koi.types._snapshot import (
    ActiveDeployment,
    ClusterSnapshot,
    JobAction,
    LaunchResult,
    Plan,
    Quota,
)
from koi.types._telemetry import Mediators, Observation, Outcomes, Resolution, variable_names
from koi.types._workload import (
    DEFAULT_PRECISIONS,
    MIN_BATCH_WINDOW_S,
    Job,
    LengthDist,
    ObjectiveWeights,
    ServingTarget,
    WorkloadProfile,
    config_precision_verdict,
    precision_verdict,
    to_precisions,
)

__all__ = [
    "DEFAULT_PRECISIONS",
    "KV_CACHE_DTYPES",
    "MIN_BATCH_WINDOW_S",
    "ActionKind",
    "ActiveDeployment",
    "AdmissionPolicy",
    "Arrival",
    "Chain",
    "ClusterSnapshot",
    "Config",
    "Engine",
    "Environment",
    "GpuSpec",
    "Job",
    "JobAction",
    "JobClass",
    "Ladder",
    "LaunchResult",
    "LengthDist",
    "LinkKind",
    "Market",
    "Mediator",
    "Mediators",
    "ModelSpec",
    "ObjectiveWeights",
    "Observation",
    "Outcome",
    "Outcomes",
    "Plan",
    "Pool",
    "Quant",
    "Quota",
    "Rank",
    "Resolution",
    "Routing",
    "ServingTarget",
    "WorkloadProfile",
    "config_precision_verdict",
    "from_data",
    "from_json",
    "parse_json",
    "precision_verdict",
    "to_data",
    "to_json",
    "to_market",
    "to_precisions",
    "variable_names",
]
