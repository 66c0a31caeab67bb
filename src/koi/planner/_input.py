"""S0's checks: a snapshot the planner can plan, or a clear :class:`InvalidInput` before any
state changes.  The value types check themselves; what needs the catalog is checked here."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from koi.errors import InvalidInput
from koi.types import ClusterSnapshot, GpuSpec, ModelSpec

__all__ = ["checked_snapshot"]


def checked_snapshot(
    snapshot: object,
    *,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    max_jobs: int,
) -> ClusterSnapshot:
    """``snapshot`` if koi can plan it, with active entries whose ladder is empty dropped.

    A host may report a job that runs nothing (scaled to zero, every replica lost) as active
    with an empty ladder; it is pending, as the simulated world reports it, so the plan places
    it rather than "reconfiguring" it from nothing.

    Raises
    ------
    InvalidInput
        Not a snapshot; more than ``max_jobs`` jobs; a job's model, a pool's GPU or the GPU of
        an active rank missing from the catalog.
    """
    if not isinstance(snapshot, ClusterSnapshot):
        raise InvalidInput(f"snapshot: expected a ClusterSnapshot, got {type(snapshot).__name__}")
    if len(snapshot.jobs) > max_jobs:
        raise InvalidInput(
            f"snapshot.jobs: {len(snapshot.jobs)} jobs exceed the limit of {max_jobs} per tick "
            "(PlannerConfig.max_jobs); plan the fleet in parts or raise the limit"
        )
    unknown = sorted({j.model for j in snapshot.jobs} - set(models))
    if unknown:
        raise InvalidInput(f"snapshot.jobs: unknown model(s) {unknown}; add them to the catalog")
    for k, pool in enumerate(snapshot.pools):
        if pool.environment.gpu not in gpus:
            msg = f"unknown GPU {pool.environment.gpu!r}; add it to the catalog"
            raise InvalidInput(f"snapshot.pools[{k}].environment.gpu: {msg}")
    # Active ranks sit in the pools (ClusterSnapshot checks that), so their GPUs are known too;
    # the model of each rank is the job's (also checked there).
    if any(a.ladder.is_empty for a in snapshot.active):
        running = [a for a in snapshot.active if not a.ladder.is_empty]
        return attrs.evolve(snapshot, active=running)
    return snapshot
