"""Batch deadlines: progress between ticks, jobs late at their current rate, and how long the
remaining work takes at the best rate on offer (the deadline slack that prices deferring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from koi.planner._evaluate import Evaluated
from koi.types import ClusterSnapshot, Job, Ladder

__all__ = ["Progress", "late_batch_jobs", "record_progress", "work_time_s"]


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
    current = snapshot.current_ladders
    now = snapshot.time_s
    out: dict[str, str] = {}
    for job in jobs:
        before = previous.get(job.id)
        deadline = job.target.deadline_s
        if (
            job.is_online
            or deadline is None
            or before is None
            or job.id not in current
            or before.ladder != current[job.id]
            or now <= before.time_s
            or job.remaining_requests <= 0
        ):
            continue
        rate = (job.completed_requests - before.completed) / (now - before.time_s)
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
