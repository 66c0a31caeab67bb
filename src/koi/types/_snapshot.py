"""What the planner sees (cluster snapshot) and what it returns (plan)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types._deploy import Chain, Ladder
from koi.types._enums import ActionKind, to_action
from koi.types._hardware import MAX_COUNT, Pool
from koi.types._telemetry import Observation
from koi.types._workload import Job
from koi.types.validators import identifier, int_in, non_negative, one_of, to_tuple

__all__ = ["ActiveDeployment", "ClusterSnapshot", "JobAction", "LaunchResult", "Plan", "Quota"]


@attrs.frozen
class ActiveDeployment:
    """The ladder a job currently runs on, and since when."""

    job_id: str = attrs.field(validator=identifier)
    ladder: Ladder
    since_s: float = attrs.field(default=0.0, validator=non_negative)


def _unique(what: str, ids: list[str]) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise InvalidInput(f"{what}: duplicate id {i!r}")
        seen.add(i)


@attrs.frozen
class Quota:
    """At most ``max_gpus`` GPUs for the jobs of one quota group (constraint C5)."""

    group: str = attrs.field(validator=identifier)
    max_gpus: int = attrs.field(validator=int_in(0, MAX_COUNT))


@attrs.frozen
class ClusterSnapshot:
    """The paper's ``R_t`` plus the job lists: one frozen view of the fleet at ``time_s``.

    Jobs with an entry in ``active`` are active; the others are pending.  ``quotas`` caps the
    GPUs of quota groups (C5).
    """

    time_s: float = attrs.field(validator=non_negative)
    jobs: tuple[Job, ...] = attrs.field(converter=to_tuple)
    pools: tuple[Pool, ...] = attrs.field(converter=to_tuple)
    active: tuple[ActiveDeployment, ...] = attrs.field(default=(), converter=to_tuple)
    quotas: tuple[Quota, ...] = attrs.field(default=(), converter=to_tuple)

    def __attrs_post_init__(self) -> None:
        _unique("jobs", [j.id for j in self.jobs])
        _unique("quotas", [q.group for q in self.quotas])
        _unique("pools", [p.id for p in self.pools])
        _unique("active", [a.job_id for a in self.active])
        models = {j.id: j.model for j in self.jobs}
        pools = {p.id: p.environment for p in self.pools}
        for k, a in enumerate(self.active):
            if a.job_id not in models:
                raise InvalidInput(f"active[{k}].job_id: unknown job {a.job_id!r}")
            for r, rank in enumerate(a.ladder.ranks):
                where = f"active[{k}].ladder.ranks[{r}]"
                env = rank.chain.environment
                if env.id not in pools:
                    raise InvalidInput(f"{where}: unknown pool {env.id!r}")
                if env != pools[env.id]:
                    raise InvalidInput(f"{where}: environment differs from pool {env.id!r}")
                if rank.chain.model != models[a.job_id]:
                    msg = (
                        f"runs model {rank.chain.model!r}, job {a.job_id!r} is {models[a.job_id]!r}"
                    )
                    raise InvalidInput(f"{where}.chain.model: {msg}")

    def job(self, job_id: str) -> Job:
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise InvalidInput(f"job_id: unknown job {job_id!r}")

    def pool(self, pool_id: str) -> Pool:
        for p in self.pools:
            if p.id == pool_id:
                return p
        raise InvalidInput(f"pool_id: unknown pool {pool_id!r}")

    @property
    def current_ladders(self) -> Mapping[str, Ladder]:
        """Job id -> current ladder, for active jobs."""
        return {a.job_id: a.ladder for a in self.active}

    @property
    def pending(self) -> tuple[Job, ...]:
        active = {a.job_id for a in self.active}
        return tuple(j for j in self.jobs if j.id not in active)


@attrs.frozen
class JobAction:
    """What the plan does with one job, the ladder it ends on and a one-line reason.

    ``recycle`` names replicas (as :attr:`Observation.replica_tpot_ms` does) that the host
    should replace with fresh ones of the same chain: only a kept or reconfigured job
    recycles.
    """

    job_id: str = attrs.field(validator=identifier)
    kind: ActionKind = attrs.field(converter=to_action, validator=one_of(ActionKind))
    ladder: Ladder = attrs.field(factory=Ladder)
    reason: str = ""
    recycle: tuple[str, ...] = attrs.field(default=(), converter=to_tuple)

    def __attrs_post_init__(self) -> None:
        running = self.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE, ActionKind.KEEP)
        if running == self.ladder.is_empty:
            need = "a non-empty" if running else "an empty"
            raise InvalidInput(f"ladder: action {self.kind.value} needs {need} ladder")
        if self.recycle and self.kind not in (ActionKind.KEEP, ActionKind.RECONFIGURE):
            raise InvalidInput(f"recycle: a {self.kind.value} action recycles no replica")
        _unique("recycle", list(self.recycle))
        for k, name in enumerate(self.recycle):
            if not isinstance(name, str) or not name:
                raise InvalidInput(f"recycle[{k}]: must be a replica's name, got {name!r}")


@attrs.frozen
class Plan:
    """One action per active and pending job, plus diagnostics that justify it."""

    time_s: float = attrs.field(validator=non_negative)
    actions: tuple[JobAction, ...] = attrs.field(converter=to_tuple)
    diagnostics: Mapping[str, Any] = attrs.field(factory=dict, eq=False, hash=False)

    def __attrs_post_init__(self) -> None:
        _unique("actions", [a.job_id for a in self.actions])

    def action(self, job_id: str) -> JobAction:
        for a in self.actions:
            if a.job_id == job_id:
                return a
        raise InvalidInput(f"job_id: no action for job {job_id!r}")

    @property
    def ladders(self) -> Mapping[str, Ladder]:
        """Job id -> ladder after the plan is applied (running jobs only)."""
        return {a.job_id: a.ladder for a in self.actions if not a.ladder.is_empty}

    def recycling(
        self,
        observations: Iterable[Observation],
        earlier: Iterable[Observation],
        ratio: float,
        pools: Iterable[Pool],
    ) -> Plan:
        """This plan, asking to recycle every replica that ran slow at ``ratio``
        (:meth:`Observation.slow_replicas`) in the last window and in the one before
        (``earlier``): one slow window can be a burst of long prompts on that replica, a bad
        GPU stays slow.  Only on a chain its job keeps with no fewer replicas (a scale-in drops
        slow replicas first), and only while ``pools`` have room, beside this plan's ladders,
        for the fresh replica to start before the slow one goes: a slow replica still serves, a
        missing one does not."""
        room = {p.id: p.capacity_gpus for p in pools}
        for ladder in self.ladders.values():
            for pid, n in ladder.gpus_by_pool().items():
                room[pid] = room.get(pid, 0) - n
        before = {(o.job_id, o.chain): o.slow_replicas(ratio) for o in earlier}
        slow: dict[tuple[str, Chain], tuple[frozenset[str], int]] = {}
        for o in observations:
            key = (o.job_id, o.chain)
            slow[key] = (o.slow_replicas(ratio) & before.get(key, frozenset()), o.replicas_up)
        actions = []
        for a in self.actions:
            names: list[str] = []
            if a.kind in (ActionKind.KEEP, ActionKind.RECONFIGURE):
                for r in a.ladder.ranks:
                    bad, up = slow.get((a.job_id, r.chain), (frozenset(), 0))
                    pid = r.chain.environment.id
                    for name in sorted(bad) if r.replicas >= up else ():
                        if room.get(pid, 0) >= r.chain.gpus:
                            room[pid] -= r.chain.gpus
                            names.append(name)
            actions.append(attrs.evolve(a, recycle=tuple(names)) if names else a)
        return attrs.evolve(self, actions=tuple(actions))


@attrs.frozen
class LaunchResult:
    """What a launcher actually brought up for one job (partial launches are normal)."""

    job_id: str = attrs.field(validator=identifier)
    requested: Ladder
    materialized: Ladder
    message: str = ""

    @property
    def complete(self) -> bool:
        return self.requested == self.materialized
