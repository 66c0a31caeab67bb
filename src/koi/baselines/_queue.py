"""Non-learning queue policies: FCFS + First-Fit, EDF and Best Fixed (paper §3, DESIGN §10.4).

None of them ever reconfigures a running job: a job is placed once, when capacity allows, and
keeps its ladder until it finishes.  They differ in the order pending jobs are served and in
which configuration they take:

* ``fcfs`` — arrival order; pools in snapshot order; the first configuration in enumeration
  order (small tensor parallelism, BF16, ...) that the surrogate says meets the target and has
  room, else the first feasible one, with as many replicas as fit;
* ``edf`` — online jobs first by SLO tightness (the latency budget of a mean request,
  ``ttft + tpot × output``), then batch jobs by earliest deadline; first fit as above;
* ``best-fixed`` — arrival order; per job the catalog configuration with the lowest predicted
  cost per token among those meeting the target, placed on the cheapest pool with room (the
  next best when it does not fit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import attrs

from koi.baselines._common import Toolkit, base_actions, safe_plan
from koi.candidates import SizedOption, free_gpus
from koi.types import ActionKind, ClusterSnapshot, Job, JobAction, Ladder, Observation, Plan

__all__ = ["BestFixed", "QueueFirstFit", "edf_key", "fcfs_key"]


def fcfs_key(job: Job) -> tuple[float, ...]:
    """Arrival order."""
    return (job.arrival_s, 0.0)


def edf_key(job: Job) -> tuple[float, ...]:
    """Online jobs first, tightest latency budget first; then batch jobs by deadline."""
    t = job.target
    if job.is_online:
        budget_ms = (t.p99_ttft_ms or math.inf) + (t.p99_tpot_ms or math.inf) * (
            job.workload.output_len.mean
        )
        return (0.0, budget_ms, job.arrival_s)
    return (1.0, t.due_s, job.arrival_s)


@attrs.define
class QueueFirstFit:
    """Serve pending jobs in ``order``; first fit; never reconfigure."""

    name: str
    toolkit: Toolkit
    order: Callable[[Job], tuple[float, ...]] = fcfs_key

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        del observations
        actions = base_actions(snapshot)
        free = free_gpus(snapshot)
        for job in sorted(snapshot.pending, key=lambda j: (*self.order(j), j.id)):
            ladder = self._first_fit(job, snapshot, free)
            if ladder is None:
                continue
            for pid, g in ladder.gpus_by_pool().items():
                free[pid] -= g
            actions[job.id] = JobAction(job.id, ActionKind.PLACE, ladder, "first fit")
        return safe_plan(snapshot, actions, self.toolkit.surrogate)

    def _first_fit(
        self, job: Job, snapshot: ClusterSnapshot, free: dict[str, int]
    ) -> Ladder | None:
        options = self.toolkit.options(job, snapshot)
        # Pass 1: a config that meets the target with all its replicas; pass 2: anything
        # feasible, with as many replicas as fit.
        for strict in (True, False):
            for pool in snapshot.pools:
                env = pool.environment
                for sized in options:
                    if sized.option.gpu != env.gpu or (strict and not sized.meets_target):
                        continue
                    ladder = self.toolkit.place(
                        job,
                        sized,
                        snapshot,
                        free,
                        cheapest_first=False,
                        partial=not strict,
                        pool_ids=(pool.id,),
                    )
                    if ladder is not None:
                        return ladder
        return None


@attrs.define
class BestFixed:
    """Per job the cheapest static configuration that meets its target; never moves."""

    toolkit: Toolkit
    name: str = "best-fixed"

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        del observations
        actions = base_actions(snapshot)
        free = free_gpus(snapshot)
        for job in sorted(snapshot.pending, key=lambda j: (j.arrival_s, j.id)):
            ranked: list[SizedOption] = self.toolkit.ranked(
                self.toolkit.options(job, snapshot), snapshot
            )
            for sized in ranked:
                ladder = self.toolkit.place(job, sized, snapshot, free)
                if ladder is None:
                    continue
                for pid, g in ladder.gpus_by_pool().items():
                    free[pid] -= g
                actions[job.id] = JobAction(job.id, ActionKind.PLACE, ladder, "best fixed config")
                break
        return safe_plan(snapshot, actions, self.toolkit.surrogate)
