"""The simulated fleet (DESIGN §10): truth model, dynamics, scenarios, evaluator and runner.

Run any policy — the koi planner or a baseline — through a built-in scenario::

    from koi.catalog import load_catalog
    from koi.sim import run, over_provision

    cat = load_catalog()
    result = run("smoke", over_provision(cat.gpus, cat.models), seed=0)
    print(result.metrics.composite, result.metrics.goodput_tok_s)

A policy sees only :class:`~koi.types.ClusterSnapshot` s and :class:`~koi.types.Observation` s;
the truth model that decides what deployments really do stays inside the world.
:class:`TruthModel` and :func:`event_rng` are exported for reference planners only (the oracle
rebuilds the truth of a world from its seed); a competing policy must never use them.
"""

from __future__ import annotations

from koi.sim._config import HardwareConfig, LaunchConfig, SamplingConfig, SimConfig, TruthConfig
from koi.sim._evaluate import Metrics, evaluate, online_admission, time_series
from koi.sim._fidelity import StratumFit, SurrogateError, stratum_fit, surrogate_error
from koi.sim._measured import MeasuredTruth
from koi.sim._plugin import SimFleetHost, observations_for
from koi.sim._policy import DeferAll, FirstFit, Policy, greedy_first_fit, over_provision
from koi.sim._runner import RunResult, build_world, resolve_pools, run
from koi.sim._scenario import (
    Event,
    EventKind,
    PoolSpec,
    Scenario,
    check_names,
    load_scenario,
    parse_scenario,
    scenario_names,
)
from koi.sim._trace import BatchRecord, JobWindow, TickRecord, Trace
from koi.sim._truth import TruthModel, event_rng
from koi.sim._world import ApplyResult, World, reference_truth

__all__ = [
    "ApplyResult",
    "BatchRecord",
    "DeferAll",
    "Event",
    "EventKind",
    "FirstFit",
    "HardwareConfig",
    "JobWindow",
    "LaunchConfig",
    "MeasuredTruth",
    "Metrics",
    "Policy",
    "PoolSpec",
    "RunResult",
    "SamplingConfig",
    "Scenario",
    "SimConfig",
    "SimFleetHost",
    "StratumFit",
    "SurrogateError",
    "TickRecord",
    "Trace",
    "TruthConfig",
    "TruthModel",
    "World",
    "build_world",
    "check_names",
    "evaluate",
    "event_rng",
    "greedy_first_fit",
    "load_scenario",
    "observations_for",
    "online_admission",
    "over_provision",
    "parse_scenario",
    "reference_truth",
    "resolve_pools",
    "run",
    "scenario_names",
    "stratum_fit",
    "surrogate_error",
    "time_series",
]
