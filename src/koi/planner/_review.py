"""Which running jobs a tick reviews in full, and which it only re-checks (keep or stop).

A fleet's tick costs what its jobs' proposals, books and replays cost, and most running jobs
have nothing new to decide: they run the ladder their last review chose, on traffic it was
sized for, clear of their bounds.  Such a job is *settled*; a tick re-predicts its keep ladder
(under the corrections in force, through C3, replayed like every keep) and leaves it out of
the proposal rounds and the budget books' LP (whose capacities exclude what settled jobs
hold).  Admission and the joint selection still see it, with its keep and stop candidates, so
it can give up GPUs to make room.

A running job is reviewed in full when anything of its own changed since its last full
review — its declaration, its ladder, its traffic by more than the drift tolerance — when
its telemetry says it is struggling, its batch is late, a pool it runs on shrank under it or
its keep ladder no longer passes C3, and in any case every ``review_every`` ticks, staggered
by job so that the reviews of a steady fleet spread evenly over the ticks (cheaper GPUs or a
better configuration are found within that many ticks).  ``review_every = 1`` reviews every
job on every tick.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping, Sequence

import attrs

from koi.planner._evaluate import Evaluated
from koi.types import ClusterSnapshot, Job, Ladder

__all__ = ["Review", "due_for_review", "reviewed", "settled_jobs"]


@attrs.frozen
class Review:
    """What a job's last full review planned for: its declaration (without its progress),
    its ladder then, and the request rate telemetry showed then."""

    declaration: Job
    ladder: Ladder
    rate_rps: float | None


def due_for_review(job_id: str, tick: int, every: int) -> bool:
    """Is ``tick`` the job's periodic full review?  Staggered by a stable hash of its id."""
    return every <= 1 or (tick + zlib.crc32(job_id.encode())) % every == 0


def _declaration(job: Job) -> Job:
    return attrs.evolve(job, completed_requests=0) if job.completed_requests else job


def _same_rate(now: float | None, then: float | None, tolerance: float) -> bool:
    if now is None or then is None:
        return now is None and then is None
    return abs(now - then) <= tolerance * max(then, 1e-9)


def settled_jobs(
    jobs: Sequence[Job],
    candidates: Mapping[str, Mapping[Ladder, Evaluated]],
    snapshot: ClusterSnapshot,
    reviews: Mapping[str, Review],
    *,
    tick: int,
    every: int,
    tau: float,
    tolerance: float,
    rates: Mapping[str, float],
    unsettled: Collection[str],
    shrunk_pools: Collection[str],
) -> frozenset[str]:
    """The running jobs this tick only re-checks (see the module docstring).  ``candidates``
    holds each job's keep evaluation; ``unsettled`` are jobs telemetry or progress flags."""
    if every <= 1:
        return frozenset()
    current = snapshot.current_ladders
    out = set()
    for job in jobs:
        ladder = current.get(job.id)
        last = reviews.get(job.id)
        if ladder is None or last is None or job.id in unsettled:
            continue
        if due_for_review(job.id, tick, every) or last.ladder != ladder:
            continue
        if last.declaration != _declaration(job):
            continue
        if not _same_rate(rates.get(job.id), last.rate_rps, tolerance):
            continue
        if any(p in shrunk_pools for p in ladder.gpus_by_pool()):
            continue
        keep = candidates[job.id].get(ladder)
        if keep is None or keep.candidate is None or keep.report.breach_probability > tau:
            continue
        out.add(job.id)
    return frozenset(out)


def reviewed(
    reviews: Mapping[str, Review],
    jobs: Sequence[Job],
    snapshot: ClusterSnapshot,
    *,
    settled: Collection[str],
    rates: Mapping[str, float],
) -> dict[str, Review]:
    """The reviews after this tick: every running job reviewed in full records what it was
    reviewed on; settled jobs keep their last review; jobs no longer planned are dropped."""
    current = snapshot.current_ladders
    out: dict[str, Review] = {}
    for job in jobs:
        if job.id in settled:
            out[job.id] = reviews[job.id]
        elif job.id in current:
            out[job.id] = Review(_declaration(job), current[job.id], rates.get(job.id))
    return out
