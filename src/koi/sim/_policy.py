"""The policy protocol every planner is run through, and two trivial built-in policies.

A policy sees exactly what a real host gives a planner — a :class:`~koi.types.ClusterSnapshot`
and the previous window's :class:`~koi.types.Observation` s — and returns a
:class:`~koi.types.Plan`.  The built-ins exist for tests and benchmarks: :class:`DeferAll`
refuses every job; :class:`FirstFit` places each pending job on the first feasible chain with
free capacity and ``headroom`` times the replicas a rough surrogate estimate says it needs
(``headroom=1.2`` is a greedy first fit, ``headroom=3`` over-provisions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from koi.candidates import free_gpus
from koi.sim._capacity import replica_capacity
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    GpuSpec,
    Job,
    JobAction,
    Ladder,
    ModelSpec,
    Observation,
    Plan,
    Pool,
    Quant,
    Rank,
)

__all__ = ["DeferAll", "FirstFit", "Policy", "greedy_first_fit", "over_provision"]


@runtime_checkable
class Policy(Protocol):
    """**Protocol:** maps what the planner may see to a plan.

    ``decide`` is called once per planning tick with the snapshot at the tick and the
    observations of the window that just ended; its wall time is the tick's planning time.
    """

    @property
    def name(self) -> str: ...

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan: ...


@attrs.frozen
class DeferAll:
    """Defers every pending job and stops every active one: serves nothing."""

    name: str = "defer-all"

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        del observations
        active = snapshot.current_ladders
        actions = [
            JobAction(j.id, ActionKind.STOP if j.id in active else ActionKind.DEFER)
            for j in snapshot.jobs
        ]
        return Plan(snapshot.time_s, actions)


@attrs.frozen
class FirstFit:
    """Keeps what runs; places each pending job on the first chain that fits.

    Chains are tried pool by pool (snapshot order, or by descending HBM bandwidth when
    ``fastest_first``) with ``tp`` = 1, 2, 4, 8 and those of ``quants`` the job accepts; the
    replica count is ``ceil(headroom × demand / capacity)`` where ``capacity`` is the output
    token rate of one replica at a batch of ``latency_batch`` sequences under the surrogate's
    operator model (prefill included) and
    ``demand`` the job's offered output tokens per second (online) or its remaining tokens over
    the time to its deadline (batch), capped by the pool's free GPUs.
    """

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    headroom: float = 1.2
    name: str = "first-fit"
    quants: tuple[Quant, ...] = (Quant.BF16, Quant.FP8)
    max_replicas: int = 16
    fastest_first: bool = False
    latency_batch: int = 32

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        del observations
        free = free_gpus(snapshot)
        actions = [
            JobAction(job_id, ActionKind.KEEP, ladder, "keep")
            for job_id, ladder in snapshot.current_ladders.items()
        ]
        pending = sorted(snapshot.pending, key=lambda j: (-j.priority, j.arrival_s, j.id))
        for job in pending:
            rank = self._place(job, snapshot, free)
            if rank is None:
                actions.append(JobAction(job.id, ActionKind.DEFER, reason="no free chain fits"))
                continue
            free[rank.chain.environment.id] -= rank.gpus
            actions.append(JobAction(job.id, ActionKind.PLACE, Ladder((rank,)), "first fit"))
        return Plan(snapshot.time_s, actions)

    def _bandwidth(self, pool: Pool) -> float:
        gpu = self.gpus.get(pool.environment.gpu)
        return gpu.hbm_tb_s if gpu is not None else 0.0

    def _place(self, job: Job, snapshot: ClusterSnapshot, free: dict[str, int]) -> Rank | None:
        from koi.surrogate import OperatorModel, feasibility

        model = self.models.get(job.model)
        if model is None:
            return None
        ctx = int(job.workload.input_len.mean + job.workload.output_len.mean)
        pools = list(snapshot.pools)
        if self.fastest_first:
            # Fastest memory first: decode speed is what latency targets mostly need.
            pools.sort(key=self._bandwidth, reverse=True)
        for pool in pools:
            gpu = self.gpus.get(pool.environment.gpu)
            if gpu is None:
                continue
            for tp in (1, 2, 4, 8):
                for quant in self.quants:
                    if not job.accepts(quant):
                        continue
                    config = Config(tp=tp, quant=quant)
                    if config.gpus > free.get(pool.id, 0):
                        continue
                    fe = feasibility(gpu, model, config, pool.environment, seq_tokens=ctx)
                    if not fe.ok:
                        continue
                    # Size at a latency-friendly batch, not the engine's maximum.
                    sizing = attrs.evolve(config, max_batch_size=self.latency_batch)
                    step = OperatorModel(gpu, model, config)
                    _, capacity = replica_capacity(
                        step, fe.kv_capacity_tokens, sizing, job.workload
                    )
                    want = self.headroom * job.required_output_tok_s(snapshot.time_s) / capacity
                    room = free[pool.id] // config.gpus
                    n = min(max(1, math.ceil(want)), self.max_replicas, room)
                    return Rank(Chain(job.model, pool.environment, config), n)
        return None


def greedy_first_fit(gpus: Mapping[str, GpuSpec], models: Mapping[str, ModelSpec]) -> FirstFit:
    """First fit with 20 % headroom over the estimated demand."""
    return FirstFit(gpus, models, headroom=1.2, name="greedy")


def over_provision(gpus: Mapping[str, GpuSpec], models: Mapping[str, ModelSpec]) -> FirstFit:
    """Fastest GPUs first with three times the estimated replicas: meets latency, pays for
    idle GPUs."""
    return FirstFit(gpus, models, headroom=3.0, name="over-provision", fastest_first=True)
