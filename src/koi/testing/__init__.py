"""Test helpers for koi and for plugin authors: Hypothesis strategies and conformance suites.

Needs the ``test`` extra (``hypothesis``, ``pytest``); the core never imports this package.

- Strategies for every value type, e.g. ``snapshots()``, ``ladders()``, ``observations()``:
  valid by construction, keyword-only bounds, :class:`~koi.errors.InvalidInput` on impossible
  bounds (raised when the strategy is first used).
- :mod:`koi.testing.contracts`: opt-in pytest suites (``ProposerContract``,
  ``TelemetryContract``, ``LauncherContract``) that a plugin's own tests subclass.
- :mod:`koi.testing.fakes`: a tiny hand-built fleet and small fake plugins.
- :func:`register_type_strategies`: opt in to ``st.from_type(<koi type>)``.
"""

from __future__ import annotations

from koi.testing._register import register_type_strategies
from koi.testing._strategies import (
    active_deployments,
    chains,
    configs,
    environments,
    gpu_specs,
    job_actions,
    jobs,
    ladders,
    launch_results,
    length_dists,
    mediators,
    model_specs,
    names,
    objective_weights,
    observations,
    outcomes,
    plans,
    pools,
    precision_sets,
    quotas,
    ranks,
    resolutions,
    snapshots,
    targets,
    workloads,
)

__all__ = [
    "active_deployments",
    "chains",
    "configs",
    "environments",
    "gpu_specs",
    "job_actions",
    "jobs",
    "ladders",
    "launch_results",
    "length_dists",
    "mediators",
    "model_specs",
    "names",
    "objective_weights",
    "observations",
    "outcomes",
    "plans",
    "pools",
    "precision_sets",
    "quotas",
    "ranks",
    "register_type_strategies",
    "resolutions",
    "snapshots",
    "targets",
    "workloads",
]
