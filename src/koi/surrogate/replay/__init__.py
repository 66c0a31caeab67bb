"""The replay engine: continuous batching over replicas, driven by a step-time model.

One engine serves both the surrogate (fed predicted step times, replayed for a short horizon)
and the simulated fleet (fed true step times, kept alive across planning ticks).
"""

from __future__ import annotations

from koi.surrogate.replay._cache import (
    CachedStepModel,
    StepCache,
    StepFromMixed,
    StepTuple,
    UncachedStepModel,
)
from koi.surrogate.replay._config import ReplayConfig
from koi.surrogate.replay._engine import ReplayEngine, run_closed_loop
from koi.surrogate.replay._replica import ReplicaSpec
from koi.surrogate.replay._request import (
    Request,
    batch_requests,
    sample_lengths,
    sample_requests,
)
from koi.surrogate.replay._stats import WindowStats
from koi.surrogate.replay._step import StepParts, StepTime, StepTimeModel, parts_of, parts_time

__all__ = [
    "CachedStepModel",
    "ReplayConfig",
    "ReplayEngine",
    "ReplicaSpec",
    "Request",
    "StepCache",
    "StepFromMixed",
    "StepParts",
    "StepTime",
    "StepTimeModel",
    "StepTuple",
    "UncachedStepModel",
    "WindowStats",
    "batch_requests",
    "parts_of",
    "parts_time",
    "run_closed_loop",
    "sample_lengths",
    "sample_requests",
]
