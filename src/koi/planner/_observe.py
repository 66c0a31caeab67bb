"""S0 and S1: the snapshot the tick plans for, and the telemetry it learns from."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import attrs

from koi.errors import InvalidInput
from koi.planner._input import checked_snapshot
from koi.plugins import PluginHost
from koi.types import Chain, ClusterSnapshot, GpuSpec, Job, ModelSpec, Observation, Outcome

__all__ = ["checked_observations", "collect_telemetry", "take_snapshot", "with_served_tokens"]


def take_snapshot(
    snapshot: ClusterSnapshot | None,
    host: PluginHost,
    *,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    max_jobs: int,
    deadline_s: float | None = None,
    last_time_s: float | None = None,
) -> ClusterSnapshot:
    """S0: the given snapshot, else the ``koi_snapshot`` hooks' (by ``deadline_s``); checked
    before anything changes.  A snapshot earlier than the last tick's (``last_time_s``) is
    refused: the clock of the fleet cannot run back.  An equal time is a re-tick."""
    if snapshot is None:
        snapshot = host.snapshot(time.time(), deadline_s=deadline_s)
        if snapshot is None:
            raise InvalidInput("snapshot: none given and no koi_snapshot plugin answered")
    checked = checked_snapshot(snapshot, gpus=gpus, models=models, max_jobs=max_jobs)
    if last_time_s is not None and checked.time_s < last_time_s:
        raise InvalidInput(
            f"snapshot.time_s: {checked.time_s} is earlier than the last tick's ({last_time_s})"
        )
    return checked


def checked_observations(
    observations: Sequence[Observation], snapshot: ClusterSnapshot
) -> list[Observation]:
    """The telemetry given to a tick, checked before anything changes: each item an
    :class:`Observation` whose fields still pass their validators, no window ending after
    ``snapshot.time_s``, and no window (job, chain, start, end) given twice — it would be
    counted twice."""
    out = list(observations)
    seen: dict[tuple[str, Chain, float, float], int] = {}
    for k, o in enumerate(out):
        if not isinstance(o, Observation):
            raise InvalidInput(f"observations[{k}]: expected an Observation, got {o!r}")
        try:
            attrs.validate(o)  # the fields' validators, again: a frozen value can be forced
        except InvalidInput as exc:
            raise InvalidInput(f"observations[{k}].{exc}") from None
        if o.end_s > snapshot.time_s:
            raise InvalidInput(
                f"observations[{k}].end_s: the window ends at {o.end_s}, after the "
                f"snapshot's time_s {snapshot.time_s} (a window in the future)"
            )
        first = seen.setdefault(_window(o), k)
        if first != k:
            raise InvalidInput(
                f"observations[{k}]: the same window as observations[{first}] (job "
                f"{o.job_id!r}, [{o.start_s}, {o.end_s})) is given twice"
            )
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
    last tick (nothing on the first tick).

    A hook's window that repeats one already reported (two sources scraping one rank) is
    dropped with an error: counted twice, it would weigh twice in learning.  (The plugin host
    skips windows outside ``(since_s, time_s)``; a plugin's telemetry, unlike the caller's,
    is never a reason to refuse the tick.)"""
    ranks = [(a.job_id, r) for a in snapshot.active for r in a.ladder.ranks]
    if not ranks or since_s is None or since_s >= snapshot.time_s:
        return list(given)
    batch = host.collect_telemetry(ranks, (since_s, snapshot.time_s), deadline_s=deadline_s)
    errors.extend(str(e) for e in batch.errors)
    errors.extend(f"telemetry skipped ({s.plugin}): {s.reason}" for s in batch.skipped)
    out = list(given)
    seen = {_window(o) for o in out}
    for o in batch.observations:
        if _window(o) in seen:
            errors.append(
                f"telemetry dropped: job {o.job_id!r} window [{o.start_s}, {o.end_s}) of "
                f"{o.chain.environment.id} was already reported"
            )
            continue
        seen.add(_window(o))
        out.append(o)
    return out


def with_served_tokens(
    observations: Sequence[Observation], jobs: Sequence[Job]
) -> list[Observation]:
    """``observations`` with a throughput where the source counted completed requests but no
    generated tokens (TensorRT-LLM 1.2 exports no token counter): the completions times the
    job's mean output length, over the window.  An overloaded window's throughput is how a
    rank's capacity is learned, and without it a rank that is slower than predicted is never
    found out.  The cost per token stays missing, and the output lengths measured from that
    rank (tokens over completions) read back the declared mean: no drift is seen there."""
    name = Outcome.THROUGHPUT.value
    by_id = {j.id: j for j in jobs}
    out = []
    for o in observations:
        job = by_id.get(o.job_id)
        if job is not None and name in o.missing and o.completed > 0:
            tok_s = o.completed * job.workload.output_len.mean / (o.end_s - o.start_s)
            o = attrs.evolve(
                o,
                outcomes=attrs.evolve(o.outcomes, throughput_tok_s=tok_s),
                missing=tuple(m for m in o.missing if m != name),
            )
        out.append(o)
    return out


def _window(o: Observation) -> tuple[str, Chain, float, float]:
    """What makes two observations the same window of the same rank."""
    return (o.job_id, o.chain, o.start_s, o.end_s)
