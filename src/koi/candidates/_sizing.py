"""How many replicas a job needs, and the workload it is sized for."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence

import attrs

from koi.candidates._config import ProposerConfig
from koi.types import Chain, Job, Mediator, Observation, Outcome

__all__ = [
    "RATE_STEP",
    "ObservedRates",
    "OutputLengths",
    "observed_rates",
    "replicas_for",
    "with_observed",
    "with_observed_output",
    "with_observed_rate",
]

#: Observed rates are rounded up to this geometric grid (5 %), so that a drifting job's
#: screens and sizings stay cached across ticks.
RATE_STEP = 1.05


def replicas_for(
    job: Job, capacity_tok_s: float, *, now_s: float, headroom: float, cfg: ProposerConfig
) -> int:
    """Replicas of a chain of ``capacity_tok_s`` that carry ``job``'s required output rate.

    Online: the offered output rate at ``cfg.utilization_target``; batch: the remaining
    output tokens within ``cfg.batch_deadline_margin`` of the time to the deadline.  Each is
    divided by ``headroom`` (< 1 in later rounds: more replicas) and capped at
    ``cfg.max_replicas``.
    """
    if job.is_online:
        need = job.workload.offered_output_tok_s / (cfg.utilization_target * headroom)
    else:
        share = cfg.batch_deadline_margin
        need = job.required_output_tok_s(now_s, time_share=share) / headroom
    return max(1, min(cfg.max_replicas, math.ceil(need / capacity_tok_s)))


def with_observed_rate(job: Job, observed_rps: float | None, *, tolerance: float) -> Job:
    """``job`` planned for the traffic it really carries when that exceeds its declared rate
    by more than ``tolerance``: workload drift shows only in telemetry, and the declaration
    stays the floor.  Other jobs come back unchanged."""
    declared = job.workload.rate_rps
    if not job.is_online or observed_rps is None or declared is None:
        return job
    if observed_rps <= declared * (1 + tolerance):
        return job
    rate = _on_grid(observed_rps, declared)
    return attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=rate))


def _on_grid(observed: float, declared: float) -> float:
    """``observed`` rounded up to the ``RATE_STEP`` grid through ``declared``."""
    return declared * RATE_STEP ** math.ceil(math.log(observed / declared, RATE_STEP))


def with_observed_output(job: Job, observed_tokens: float | None, *, tolerance: float) -> Job:
    """``job`` planned for the output lengths its requests really have when their mean
    exceeds the declared one by more than ``tolerance`` (the rate's rule: the declaration is
    the floor, and the mean is rounded up on the same grid).  The declared maximum stays."""
    dist = job.workload.output_len
    if not job.is_online or observed_tokens is None:
        return job
    if observed_tokens <= dist.mean * (1 + tolerance):
        return job
    longer = attrs.evolve(dist, mean=min(_on_grid(observed_tokens, dist.mean), float(dist.max)))
    return attrs.evolve(job, workload=attrs.evolve(job.workload, output_len=longer))


def with_observed(
    job: Job, observed_rps: float | None, observed_tokens: float | None, *, tolerance: float
) -> Job:
    """``job`` under both drift rules: planned for the request rate and the output length its
    telemetry shows where they exceed the declaration (:func:`with_observed_rate`,
    :func:`with_observed_output`).  koi's planner and every surrogate baseline apply it."""
    job = with_observed_rate(job, observed_rps, tolerance=tolerance)
    return with_observed_output(job, observed_tokens, tolerance=tolerance)


@attrs.define
class ObservedRates:
    """Each job's :func:`observed_rates` as its telemetry goes, held over a change of chains.

    A job that moves to other chains is served, in the window of the move, by the chains it
    leaves until the new ones are up, and a replaced chain reports nothing once it is gone: the
    window's observations count only what the new chains received.  So in a window whose
    chains differ from those of the window before it, the rate is at least the one before.
    Without this, on a one-hour fleet a service whose traffic rose tenfold read 30 requests a
    second, then 25 in the window of its move to a ladder sized for it (the old chain's share
    unreported), and was re-sized for 25.  A window after a gap in the job's telemetry is read
    as it is.
    """

    backlog_drain: float = 1.0
    _rates: dict[str, float] = attrs.field(factory=dict)
    # Each job's chains and the end of its last observed window.
    _seen: dict[str, tuple[frozenset[Chain], float]] = attrs.field(factory=dict)

    @property
    def rates(self) -> Mapping[str, float]:
        """Requests per second by job id (jobs whose ranks received any, ever)."""
        return self._rates

    def get(self, job_id: str) -> float | None:
        return self._rates.get(job_id)

    def update(self, observations: Sequence[Observation]) -> None:
        """Add one window's observations."""
        chains: dict[str, set[Chain]] = {}
        window: dict[str, tuple[float, float]] = {}
        for o in observations:
            chains.setdefault(o.job_id, set()).add(o.chain)
            lo, hi = window.get(o.job_id, (o.start_s, o.end_s))
            window[o.job_id] = (min(lo, o.start_s), max(hi, o.end_s))
        for job_id, rate in observed_rates(observations, self.backlog_drain).items():
            seen = self._seen.get(job_id)
            if seen is not None and seen[1] == window[job_id][0] and seen[0] != chains[job_id]:
                rate = max(rate, self._rates.get(job_id, 0.0))
            self._rates[job_id] = rate
        for job_id, (_, end) in window.items():
            self._seen[job_id] = (frozenset(chains[job_id]), end)


@attrs.define
class OutputLengths:
    """Each job's mean output tokens per completed request, as its last ``windows`` windows
    of telemetry show it: tokens generated (throughput times the window) over requests
    completed: an :class:`~koi.types.Observation` carries no lengths, but it carries both.

    One window is noisy — a growing queue delays completions, not tokens — so a job's mean
    needs ``windows`` windows and is taken over their sums.
    """

    windows: int = 3
    _log: dict[str, deque[tuple[float, float]]] = attrs.field(factory=dict)

    def update(self, observations: Sequence[Observation]) -> None:
        """Add one window's observations (every rank of a job counts toward its window)."""
        window: dict[str, tuple[float, float]] = {}
        for o in observations:
            tput = o.measured(Outcome.THROUGHPUT.value)
            if tput is None or o.completed <= 0:
                continue
            tokens, done = window.get(o.job_id, (0.0, 0.0))
            window[o.job_id] = (tokens + tput * (o.end_s - o.start_s), done + o.completed)
        for job_id, sums in window.items():
            self._log.setdefault(job_id, deque(maxlen=self.windows)).append(sums)

    def mean(self, job_id: str) -> float | None:
        """The job's mean output tokens, or ``None`` before ``windows`` windows of it."""
        log = self._log.get(job_id)
        if log is None or len(log) < self.windows:
            return None
        done = sum(d for _, d in log)
        return sum(t for t, _ in log) / done if done > 0 else None


def observed_rates(
    observations: Sequence[Observation], backlog_drain: float = 1.0
) -> dict[str, float]:
    """Requests per second each job's traffic asked of its ranks in the last window: those
    they received plus those waiting in their queues (the ``queue_depth`` mediator, per
    replica up), for jobs whose ranks received any.

    A backlog is work still to do: a ladder sized for the arrivals alone serves them as
    they come and never drains what is queued, so a rank whose queue outgrew it stays
    minutes behind for as long as it runs.  Counted over one window, the backlog is what
    a ladder must clear by the next one -- up to ``backlog_drain`` times the arrivals: a
    backlog many windows deep would otherwise ask for a ladder many times the job's
    traffic, which the fleet cannot give it, and the job would be judged hopeless and
    served on whatever small ladder breaches least while its queue grows.  Drained at
    most that fast, it is cleared over as many windows as it takes."""
    arrived: dict[str, int] = {}
    waiting: dict[str, float] = {}
    span: dict[str, tuple[float, float]] = {}
    for o in observations:
        arrived[o.job_id] = arrived.get(o.job_id, 0) + o.requests
        queued = o.measured(Mediator.QUEUE_DEPTH) or 0.0
        waiting[o.job_id] = waiting.get(o.job_id, 0.0) + queued * o.replicas_up
        lo, hi = span.get(o.job_id, (o.start_s, o.end_s))
        span[o.job_id] = (min(lo, o.start_s), max(hi, o.end_s))
    return {
        j: (n + min(waiting[j], backlog_drain * n)) / (span[j][1] - span[j][0])
        for j, n in arrived.items()
        if n > 0
    }
