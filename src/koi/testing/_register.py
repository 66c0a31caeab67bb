"""Opt-in registration of koi's strategies with Hypothesis' type registry."""

from __future__ import annotations

from hypothesis import strategies as st

from koi.testing import _strategies as s
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Environment,
    GpuSpec,
    Job,
    JobAction,
    Ladder,
    LaunchResult,
    LengthDist,
    Mediators,
    ModelSpec,
    ObjectiveWeights,
    Observation,
    Outcomes,
    Plan,
    Pool,
    Quota,
    Rank,
    Resolution,
    ServingTarget,
    WorkloadProfile,
)

__all__ = ["register_type_strategies"]


def register_type_strategies() -> None:
    """Make ``st.from_type(Chain)`` (and every other koi value type) use koi's strategies.

    Hypothesis' type registry is global, so this is an explicit call (for example in your
    ``conftest.py``), never an import side effect.

    .. versionadded:: 0.1
    """
    table: dict[type, st.SearchStrategy[object]] = {
        GpuSpec: s.gpu_specs(),
        Environment: s.environments(),
        Pool: s.pools(),
        Quota: s.quotas(),
        ModelSpec: s.model_specs(),
        LengthDist: s.length_dists(),
        WorkloadProfile: s.workloads(),
        ServingTarget: s.targets(),
        ObjectiveWeights: s.objective_weights(),
        Job: s.jobs(),
        Config: s.configs(),
        Chain: s.chains(),
        Rank: s.ranks(),
        Ladder: s.ladders(),
        Outcomes: s.outcomes(),
        Mediators: s.mediators(),
        Observation: s.observations(),
        Resolution: s.resolutions(),
        ActiveDeployment: s.active_deployments(),
        ClusterSnapshot: s.snapshots(),
        JobAction: s.job_actions(),
        Plan: s.plans(),
        LaunchResult: s.launch_results(),
    }
    for kind, strategy in table.items():
        st.register_type_strategy(kind, strategy)
