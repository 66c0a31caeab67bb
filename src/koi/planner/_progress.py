"""Batch deadlines: progress between ticks, jobs late at their current rate or waiting past
their slack, and how long the remaining work takes at the best rate on offer (the deadline
slack that prices deferring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, Sequence

import attrs

from koi.planner._evaluate import Evaluated, Evaluator
from koi.types import ClusterSnapshot, Job, Ladder

__all__ = [
    "MAX_SHORTFALL",
    "Progress",
    "late_batch_jobs",
    "observed_rate",
    "pausable",
    "price_deferrals",
    "record_progress",
    "waits_past_its_slack",
    "with_observed_shortfall",
    "work_time_s",
]

#: A late job is planned for at most this many times its remaining work.
MAX_SHORTFALL = 20.0


@attrs.frozen
class Progress:
    """What a running batch job had completed at one tick, on which ladder."""

    time_s: float
    completed: int
    ladder: Ladder


def record_progress(snapshot: ClusterSnapshot) -> dict[str, Progress]:
    """This tick's progress of every running batch job."""
    current = snapshot.current_ladders
    return {
        j.id: Progress(snapshot.time_s, j.completed_requests, current[j.id])
        for j in snapshot.jobs
        if not j.is_online and j.id in current
    }


def late_batch_jobs(
    jobs: Sequence[Job], snapshot: ClusterSnapshot, previous: Mapping[str, Progress]
) -> dict[str, str]:
    """Batch jobs that miss their deadline at the rate they ran since the last tick, with why.

    Only a job that ran the same ladder over the whole window is judged (a window with a
    launch in it understates the rate).
    """
    now = snapshot.time_s
    out: dict[str, str] = {}
    for job in jobs:
        rate = observed_rate(job, snapshot, previous)
        deadline = job.target.deadline_s
        if rate is None or deadline is None or job.remaining_requests <= 0:
            continue
        left = deadline - now
        if rate <= 0:
            out[job.id] = "no progress over the last window"
        elif job.remaining_requests / rate > left:
            need = job.remaining_requests / rate
            out[job.id] = (
                f"at {rate:.2f} req/s the remaining {job.remaining_requests} requests take "
                f"{need:.0f} s; {max(left, 0.0):.0f} s left to the deadline"
            )
    return out


def waits_past_its_slack(
    job: Job, mine: Mapping[Ladder, Evaluated], *, now_s: float, horizon_s: float
) -> str | None:
    """Why a batch job the plan leaves waiting is at risk of its deadline, or ``None``: its
    remaining work, at the best rate any of its candidates reaches, leaves less than
    ``horizon_s`` before the deadline (the clock alone when no candidate predicts a rate).
    Such a job is late before it has run a window to be judged on."""
    deadline = job.target.deadline_s
    if job.is_online or deadline is None or job.remaining_requests <= 0:
        return None
    left = deadline - now_s
    work_s = work_time_s(job, mine)
    if left - work_s >= horizon_s:
        return None
    rate = f"{work_s:.0f} s at the best rate on offer" if work_s > 0 else "no rate predicted"
    return (
        f"not served; the remaining {job.remaining_requests} requests take {rate}, "
        f"{max(left, 0.0):.0f} s left to the deadline"
    )


def observed_rate(
    job: Job, snapshot: ClusterSnapshot, previous: Mapping[str, Progress]
) -> float | None:
    """Requests per second a running batch job completed since the last tick, if it ran the
    same ladder over the whole window (a window with a launch in it understates the rate)."""
    before = previous.get(job.id)
    current = snapshot.current_ladders.get(job.id)
    if (
        job.is_online
        or before is None
        or current is None
        or before.ladder != current
        or snapshot.time_s <= before.time_s
    ):
        return None
    return (job.completed_requests - before.completed) / (snapshot.time_s - before.time_s)


def with_observed_shortfall(job: Job, predicted_tok_s: float, observed_rps: float) -> Job:
    """A late batch job planned for the work its ladder really gets through: its remaining
    requests scaled by how far the predicted throughput of its ladder overshoots the observed
    one (at most :data:`MAX_SHORTFALL`), so every candidate is sized, scored and judged by C3
    as if the surrogate were as optimistic about it as it was about the running ladder."""
    observed_tok_s = observed_rps * job.workload.output_len.mean
    if job.is_online or job.remaining_requests <= 0 or predicted_tok_s <= 0:
        return job
    factor = min(predicted_tok_s / max(observed_tok_s, 1e-9), MAX_SHORTFALL)
    if factor <= 1.0:
        return job
    remaining = math.ceil(job.remaining_requests * factor)
    total = job.completed_requests + remaining
    return attrs.evolve(job, workload=attrs.evolve(job.workload, total_requests=total))


def work_time_s(job: Job, candidates: Mapping[Ladder, Evaluated]) -> float:
    """Seconds a batch job's remaining output takes at the fastest rate any of its candidates
    is predicted to reach (0 for online jobs, or when none has a prediction)."""
    if job.is_online or job.remaining_requests <= 0:
        return 0.0
    best = max(
        (
            ev.prediction.outcomes.throughput_tok_s
            for ev in candidates.values()
            if ev.prediction is not None and ev.prediction.feasible
        ),
        default=0.0,
    )
    if not best > 0 or not math.isfinite(best):
        return 0.0
    return job.remaining_requests * job.workload.output_len.mean / best


def price_deferrals(
    jobs: Sequence[Job],
    candidates: Mapping[str, MutableMapping[Ladder, Evaluated]],
    evaluator: Evaluator,
) -> list[Job]:
    """Price each batch job's deferral (or stop) by the deadline slack its remaining work
    leaves at the best rate its candidates reach (in place); the jobs none of whose
    candidates predicts a rate are returned, still priced by the clock alone."""
    unpriced = []
    for job in jobs:
        mine = candidates[job.id]
        work_s = work_time_s(job, mine)
        if work_s > 0:
            mine[Ladder()] = evaluator.defer(job, work_s=work_s)
        elif not job.is_online:
            unpriced.append(job)
    return unpriced


def pausable(
    job: Job, candidates: Mapping[Ladder, Evaluated], *, now_s: float, horizon_s: float
) -> bool:
    """A batch job that may be stopped and still make its deadline: its predicted work at the
    best rate on offer fits twice in the time left (the prediction is the surrogate's, and a
    paused job's slack is only as good as it), with at least ``horizon_s`` to spare.  False
    for a job without a deadline (nothing to measure the slack against) and online jobs."""
    deadline = job.target.deadline_s
    if job.is_online or deadline is None:
        return False
    work_s = work_time_s(job, candidates)
    left = deadline - now_s
    return work_s > 0 and 2 * work_s <= left and left - work_s >= horizon_s
