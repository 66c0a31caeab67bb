"""What keeps a tick from freezing the fleet: the safe plan, shedding over-capacity pools, and
the rules that keep a serving job from being stopped for no reason.

A host reports situations the optimisation alone handles badly: a batch job that finished but
is still deployed, a pool shrunk under its deployments (a reclaim, a quota cut), incumbents
that no longer pass C2.  Each gets a rule here, used both by the planned path (as candidate
adjustments) and by the safe plan a failed stage falls back to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import attrs

from koi.selector import Candidate
from koi.types import ActionKind, ActiveDeployment, ClusterSnapshot, Job, JobAction, Ladder, Rank

__all__ = [
    "finished_jobs",
    "guarded_stop",
    "over_capacity",
    "repairs_only",
    "safe_actions",
    "shed_transient",
    "shrunk_ladder",
]

# A stop must lose to the keep by at least this much (score units) unless something else
# gains from the freed GPUs.
_KEEP_MARGIN = 1e-6


def finished_jobs(snapshot: ClusterSnapshot) -> list[Job]:
    """Batch jobs with nothing left to serve (deployed or not): they are stopped."""
    return [j for j in snapshot.jobs if not (j.is_online or j.remaining_requests > 0)]


def over_capacity(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Pool id -> GPUs held now beyond the pool's capacity (a finished job's GPUs count: they
    stay taken until the host applies its stop)."""
    held: Counter[str] = Counter()
    for a in snapshot.active:
        held.update(a.ladder.gpus_by_pool())
    capacity = {p.id: p.capacity_gpus for p in snapshot.pools}
    return {p: n - capacity[p] for p, n in sorted(held.items()) if n > capacity[p]}


def shrunk_ladder(ladder: Ladder, snapshot: ClusterSnapshot, over: Mapping[str, int]) -> Ladder:
    """``ladder`` with its replicas on over-capacity pools cut in proportion to the shortfall
    (every job on a pool shrunk by the same share fits the pool together)."""
    if not over:
        return ladder
    capacity = {p.id: p.capacity_gpus for p in snapshot.pools}
    ranks = []
    for r in ladder.ranks:
        pool = r.chain.environment.id
        if pool in over:
            share = capacity[pool] / (capacity[pool] + over[pool])
            keep = int(r.replicas * share)
            if keep > 0:
                ranks.append(Rank(r.chain, keep))
        else:
            ranks.append(r)
    return Ladder(tuple(ranks))


def repairs_only(ladders: Iterable[Ladder], current: Ladder, *, on_over_pool: bool) -> list[Ladder]:
    """The ``ladders`` a job that telemetry shows failing may take: none that only removes
    replicas from what it runs.  Its measurements already say its current ladder is not
    enough, so a smaller one is a prediction contradicted by what was seen; it may still be
    stopped (guarded like any stop), moved or grown, and a pool shrunk under it still sheds."""
    if on_over_pool:
        return list(ladders)
    return [lad for lad in ladders if lad.is_empty or not lad.scales_in(current)]


def shed_transient(
    candidate: Candidate, held: Mapping[str, int], over: Mapping[str, int]
) -> Candidate:
    """A candidate of a job holding GPUs on an over-capacity pool, with break-before-make on
    those pools: GPUs a reclaim took cannot overlap with their replacement.  Elsewhere the
    make-before-break peak (held + new) stands."""
    if not any(p in over for p in held):
        return candidate
    peak = dict(candidate.gpus_by_pool)
    if candidate.changes:
        for pool, n in held.items():
            if pool not in over:
                peak[pool] = peak.get(pool, 0) + n
    return attrs.evolve(candidate, transient_gpus_by_pool=peak)


def guarded_stop(
    stop: Candidate,
    *,
    job: Job,
    keep: Candidate | None,
    keep_infeasible: bool,
    on_over_pool: bool,
) -> Candidate:
    """The stop candidate of an active job, with the rules that make stopping safe.

    * Stopping frees the GPUs at once (nothing new comes up, so no make-before-break peak).
    * A stop the job cannot avoid (its ladder fails C2 now, or sits on a pool shrunk below
      what runs) does not count against the swap budget.
    * An online job that is serving is not stopped for a better score alone: its stop is
      worth less than its keep, so it is chosen only when the freed GPUs gain more elsewhere.
    """
    forced = keep_infeasible or on_over_pool
    value = stop.value
    if job.is_online and keep is not None and not forced:
        value = min(value, keep.value - _KEEP_MARGIN)
    return attrs.evolve(
        stop, transient_gpus_by_pool={}, changes=stop.changes and not forced, value=value
    )


def _shed_order(active: ActiveDeployment, jobs: Mapping[str, Job]) -> tuple[int, int, float, str]:
    """Who goes first when a pool must shed: lowest priority, batch before online, newest."""
    job = jobs[active.job_id]
    return (job.priority, int(job.is_online), -active.since_s, job.id)


def safe_actions(snapshot: ClusterSnapshot, reason: str) -> list[JobAction]:
    """The plan that is safe whatever failed: every finished job stopped, every active job
    kept unless its pool shrank below what runs (then the lowest-priority, newest ladders on
    it are stopped until the pool fits), every pending job deferred."""
    jobs = {j.id: j for j in snapshot.jobs}
    done = {j.id for j in finished_jobs(snapshot)}
    over = dict(over_capacity(snapshot))
    shed: set[str] = set()
    for a in sorted(
        (a for a in snapshot.active if a.job_id not in done), key=lambda a: _shed_order(a, jobs)
    ):
        if not over:
            break
        use = a.ladder.gpus_by_pool()
        if not any(p in over for p in use):
            continue
        shed.add(a.job_id)
        for pool, n in use.items():
            if pool in over:
                over[pool] -= n
                if over[pool] <= 0:
                    del over[pool]
    current = snapshot.current_ladders
    actions = []
    for j in snapshot.jobs:
        if j.id in done:
            actions.append(JobAction(j.id, ActionKind.STOP, Ladder(), "finished"))
        elif j.id in shed:
            why = f"{reason}; shed: its pool shrank below what runs"
            actions.append(JobAction(j.id, ActionKind.STOP, Ladder(), why))
        elif j.id in current:
            actions.append(JobAction(j.id, ActionKind.KEEP, current[j.id], reason))
        else:
            actions.append(JobAction(j.id, ActionKind.DEFER, Ladder(), reason))
    return sorted(actions, key=lambda a: a.job_id)
