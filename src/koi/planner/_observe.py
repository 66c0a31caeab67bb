"""S0 and S1: the snapshot the tick plans for, and the telemetry it learns from."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from koi.errors import InvalidInput
from koi.planner._input import checked_snapshot
from koi.plugins import PluginHost
from koi.types import ClusterSnapshot, GpuSpec, ModelSpec, Observation

__all__ = ["checked_observations", "collect_telemetry", "take_snapshot"]


def take_snapshot(
    snapshot: ClusterSnapshot | None,
    host: PluginHost,
    *,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    max_jobs: int,
    deadline_s: float | None = None,
) -> ClusterSnapshot:
    """S0: the given snapshot, else the ``koi_snapshot`` hooks' (by ``deadline_s``); checked
    before anything changes."""
    if snapshot is None:
        snapshot = host.snapshot(time.time(), deadline_s=deadline_s)
        if snapshot is None:
            raise InvalidInput("snapshot: none given and no koi_snapshot plugin answered")
    return checked_snapshot(snapshot, gpus=gpus, models=models, max_jobs=max_jobs)


def checked_observations(observations: Sequence[Observation]) -> list[Observation]:
    out = list(observations)
    for k, o in enumerate(out):
        if not isinstance(o, Observation):
            raise InvalidInput(f"observations[{k}]: expected an Observation, got {o!r}")
    return out


def collect_telemetry(
    host: PluginHost,
    snapshot: ClusterSnapshot,
    given: Sequence[Observation],
    since_s: float | None,
    errors: list[str],
    deadline_s: float | None = None,
) -> list[Observation]:
    """S1: ``given`` plus what the telemetry hooks report for every deployed rank since the
    last tick (nothing on the first tick)."""
    ranks = [(a.job_id, r) for a in snapshot.active for r in a.ladder.ranks]
    if not ranks or since_s is None or since_s >= snapshot.time_s:
        return list(given)
    batch = host.collect_telemetry(ranks, (since_s, snapshot.time_s), deadline_s=deadline_s)
    errors.extend(str(e) for e in batch.errors)
    errors.extend(f"telemetry skipped ({s.plugin}): {s.reason}" for s in batch.skipped)
    return [*given, *batch.observations]
