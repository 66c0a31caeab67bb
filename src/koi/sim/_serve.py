"""Serving one window: traffic, the replay of every deployed chain, accounting, telemetry.

Internal to the world (:class:`~koi.sim.World` inherits :class:`Serving`).  Online arrivals are
sampled per job at the true rate and split over the job's serving chains in proportion to
their true capacity, less what a chain's queue already asks of it (:func:`_drain_shares`);
batch jobs run closed loop.  A window may be replayed on a sampled
sub-window (docs/evaluation.md, "Sampled windows"): each replayed request then stands for
``scale`` real ones, and its id carries the window it was issued in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

import attrs
import numpy as np

from koi.sim._config import SimConfig
from koi.sim._deploy import Deployment
from koi.sim._prefix import prefix_ids, with_prefixes
from koi.sim._scenario import Scenario
from koi.sim._state import ID_BLOCK, JobState
from koi.sim._telemetry import observe, request_outcomes
from koi.sim._trace import JobWindow
from koi.surrogate.replay import Request, WindowStats, sample_lengths, sample_requests
from koi.types import Observation, WorkloadProfile

__all__ = ["Serving"]


class Serving:
    """The window half of the world: needs ``cfg``, ``scenario``, ``now`` and ``_jobs``."""

    cfg: SimConfig
    scenario: Scenario
    now: float
    _jobs: dict[str, JobState]

    def serve(self, end: float) -> tuple[list[Observation], list[JobWindow]]:
        """Simulate ``[now, end)``: traffic, launches, preemptions; telemetry and accounting."""
        t0, t1 = self.now, end
        observations: list[Observation] = []
        windows: list[JobWindow] = []
        for s in self._jobs.values():
            obs, win = self._serve_job(s, t0, t1)
            observations.extend(obs)
            windows.append(win)
        return observations, windows

    def in_flight(self) -> dict[str, float]:
        """Online requests admitted to a batch and not finished, per job (world counts).

        What a chain has running is a level: a real fleet ends a run with a few seconds of
        requests in flight, but each replayed request stands for ``scale`` real ones, so
        counted as unserved they cost a job several percent of its run (docs/evaluation.md).
        """
        out: dict[str, float] = {}
        for s in self._jobs.values():
            if not s.job.is_online:
                continue
            engines = [d.engine for d in s.deployments + s.outgoing if d.engine is not None]
            ids = [i for engine in engines for i in engine.running_ids()]
            if ids:
                out[s.job.id] = float(self._weights(s, np.asarray(ids)).sum())
        return out

    def _scale(self, s: JobState, span: float, rate: float) -> float:
        sc = self.cfg.sampling
        if rate <= 0:
            return 1.0
        w = min(span, max(sc.min_window_s, sc.max_requests_per_window / rate))
        return span / w

    def _serve_job(self, s: JobState, t0: float, t1: float) -> tuple[list[Observation], JobWindow]:
        job = s.job
        span = t1 - t0
        deps = s.deployments + s.outgoing
        if job.arrival_s >= t1 or s.done_s is not None:
            return [], JobWindow(job.id)
        start = max(t0, job.arrival_s)
        if job.is_online:
            rate = s.actual.rate_rps or 0.0
        else:
            rate = sum(d.capacity_req_s * len(d.held) for d in deps if d.stop_s is None)
        scale = self._scale(s, span, rate)
        s.scale = scale
        s.scales.append(scale)
        e0 = s.clock
        s.clock = e0 + span / scale
        routed: dict[int, list[Request]] = {id(d): [] for d in deps}
        routed_n: Counter[int] = Counter()
        offered = offered_tok = dropped = 0.0
        if job.is_online and rate > 0:
            reqs = sample_requests(
                s.actual,
                s.rng,
                e0 + (start - t0) / scale,
                s.clock,
                id_start=s.window * ID_BLOCK,
            )
            reqs = with_prefixes(reqs, s.actual, s.rng, self.cfg.truth.prefix_zipf)
            offered = len(reqs) * scale
            offered_tok = sum(r.output_tokens for r in reqs) * scale
            draws = s.rng.uniform(size=len(reqs)).tolist()
            share = (
                _drain_shares(deps, 0.5 * (t0 + t1), span / scale, len(reqs))
                if self.cfg.drain_backlogs
                else {}
            )
            cuts = sorted({x for d in deps for x in d.change_points() if t0 < x < t1} | {t0, t1})
            # Serving weights are constant between change points (launches, losses, stops).
            k = 0
            picks: list[tuple[Deployment, float]] = []
            for r, u in zip(reqs, draws, strict=True):
                x = t0 + (r.arrival_s - e0) * scale
                if k == 0 or x >= cuts[k]:
                    while k < len(cuts) - 1 and x >= cuts[k]:
                        k += 1
                    mid = 0.5 * (cuts[k - 1] + cuts[k])
                    picks = [
                        (d, d.up_at(mid) * d.capacity_req_s * share.get(id(d), 1.0)) for d in deps
                    ]
                    picks = [(d, wgt) for d, wgt in picks if wgt > 0]
                    total = sum(wgt for _, wgt in picks)
                if not picks:
                    dropped += scale
                    continue
                u *= total
                pick = picks[-1][0]
                for d, wgt in picks:
                    u -= wgt
                    if u <= 0:
                        pick = d
                        break
                routed[id(pick)].append(r)
                routed_n[id(pick)] += 1
        topups = self._batch_topups(s, deps) if not job.is_online else {}
        stats: dict[int, WindowStats] = {}
        for d in deps:
            d.expected = d.expected_in(t0, t1)
            st = d.run_window(t0, t1, e0, scale, routed[id(d)], topups.get(id(d), 0))
            if st is not None:
                stats[id(d)] = st
        win = self._account(s, (t0, t1, e0, scale), deps, stats, (offered, offered_tok, dropped))
        if job.is_online:
            self._hand_over(deps, t1)
        obs = [
            self._observe(
                s, d, stats[id(d)], (t0, t1), routed_n[id(d)] * scale, win.batch_completed
            )
            for d in s.deployments
            if id(d) in stats
        ]
        return obs, win

    @staticmethod
    def _hand_over(deps: list[Deployment], t1: float) -> None:
        """Requests still on chains that serve nothing after ``t1`` go to the job's chain that
        serves most, as a router re-sends a retired chain's requests.

        Without this, the requests in flight on a replaced chain were lost with it, each
        standing for ``scale`` real ones although what a chain has in flight is a level, not
        a flow: on hetero-3h a swap cost a steady job up to two windows of its traffic.  Only
        a chain with replicas up takes them; with none (a break-before-make swap still
        launching, or a stopped job) they are lost, as in a real fleet.
        """
        ending: list[Deployment] = []
        serving: list[Deployment] = []
        for d in deps:
            if d.ends_by(t1):
                ending.append(d)
            elif d.engine_reps:
                serving.append(d)
        if not ending or not serving:
            return
        to = max(serving, key=lambda d: d.capacity_req_s * len(d.engine_reps)).engine
        assert to is not None  # a chain with replicas in its engine has one
        for d in ending:
            d.hand_over(to)

    def _batch_topups(self, s: JobState, deps: list[Deployment]) -> dict[int, int]:
        """Re-arm each batch deployment's closed loop with the work not yet done or in flight.

        Work held by discarded engines (stopped, preempted, replaced) was lost: it is issued
        again, so a batch job never stalls on requests that vanished with their replica.
        """
        total = float(s.job.workload.total_requests or 0)
        in_flight = 0.0
        for d in deps:
            if d.engine is not None:
                in_flight += (d.engine.backlog + d.engine.pending_arrivals) * s.scale
        s.unissued = max(0.0, total - s.completed - in_flight)
        out = {}
        for d in deps:
            if d.stop_s is not None:
                continue
            d.feed = self._batch_source(s)
            if d.engine is not None:
                target = d.concurrency_per_replica * len(d.engine_reps)
                out[id(d)] = max(1, target - d.engine.backlog - d.engine.pending_arrivals)
        return out

    def _weights(self, s: JobState, ids: np.ndarray) -> np.ndarray:
        table = np.asarray(s.scales)
        return table[(ids // ID_BLOCK).astype(np.int64)]

    def _account(
        self,
        s: JobState,
        window: tuple[float, float, float, float],
        deps: list[Deployment],
        stats: Mapping[int, WindowStats],
        offered: tuple[float, float, float],
    ) -> JobWindow:
        """The job's :class:`JobWindow`; advances batch progress.

        ``window`` is (t0, t1, e0, scale); ``offered`` is (requests, tokens, dropped).
        """
        job = s.job
        t0, t1, e0, scale = window
        totals = np.zeros(6)
        ends: list[np.ndarray] = []
        wts: list[np.ndarray] = []
        outs: list[np.ndarray] = []
        for d in deps:
            st = stats.get(id(d))
            if st is None or not st.finished:
                continue
            w = self._weights(s, st.request_ids)
            totals += request_outcomes(job, st, w)
            if not job.is_online:
                ends.append(st.finish_s)
                wts.append(w)
                outs.append(st.output_tokens)
        finished, out_tok, ttft_ok, tpot_ok, slo_ok, slo_tok = totals.tolist()
        if finished > 0:
            s.admitted = True
        batch_done = 0.0
        if ends:
            batch_done, out_tok = self._batch_progress(s, t0, e0, scale, ends, wts, outs)
            finished = batch_done
        online = job.is_online
        price = sum(len(d.held) * d.chain.price_usd_per_h for d in deps)
        return JobWindow(
            job_id=job.id,
            offered=offered[0],
            offered_tokens=offered[1],
            finished=finished,
            ttft_ok=ttft_ok if online else 0.0,
            tpot_ok=tpot_ok if online else 0.0,
            slo_ok=slo_ok if online else 0.0,
            slo_tokens=slo_tok if online else 0.0,
            output_tokens=out_tok,
            batch_completed=batch_done,
            gpus=sum(d.gpus for d in deps),
            cost_usd=price * (t1 - t0) / 3600.0,
            dropped=offered[2],
        )

    def _batch_progress(
        self,
        s: JobState,
        t0: float,
        e0: float,
        scale: float,
        ends: list[np.ndarray],
        wts: list[np.ndarray],
        outs: list[np.ndarray],
    ) -> tuple[float, float]:
        """The requests and output tokens this window adds to a batch job's progress."""
        total = float(s.job.workload.total_requests or 0)
        deadline = s.job.target.due_s
        end = np.concatenate(ends)
        w = np.concatenate(wts)
        out = np.concatenate(outs)
        order = np.argsort(end, kind="stable")
        end, w, out = end[order], w[order], out[order]
        world_t = t0 + (end - e0) * scale
        cum = s.completed + np.cumsum(w)
        need = cum < total
        upto = int(np.searchsorted(cum, total, side="left")) + 1 if not need.all() else len(cum)
        upto = min(upto, len(cum))
        done_now = float(min(cum[upto - 1], total) - s.completed)
        # The request that finishes the job stands only for the work that was left: a sampled
        # request's weight may exceed it (one of 30 for a job of one request).
        w = w[:upto].copy()
        w[-1] -= max(float(cum[upto - 1]) - total, 0.0)
        in_time = world_t[:upto] <= deadline
        s.by_deadline = min(total, s.by_deadline + float(w[in_time].sum()))
        tokens = float((w * out[:upto]).sum())
        s.batch_tokens += tokens
        s.completed += done_now
        if s.completed >= total - 1e-9:
            s.done_s = float(world_t[upto - 1])
            for d in s.deployments:
                d.stop_s = s.done_s
        s.job = attrs.evolve(s.job, completed_requests=min(int(s.completed), int(total)))
        return done_now, tokens

    def _observe(
        self,
        s: JobState,
        d: Deployment,
        st: WindowStats,
        window: tuple[float, float],
        routed: float,
        done: float,
    ) -> Observation:
        t0, t1 = window
        last = t1 if d.stop_s is None else min(t1, d.stop_s)  # a finished batch job stops
        # Announced-preempted replicas still run but are no longer the planner's.
        up = min(d.up_at(last - 1e-9), d.expected)
        remaining = max(0.0, (s.job.workload.total_requests or 0) - s.completed)
        # Each finished replayed request stands for ``scale`` real ones, but the requests still
        # running at the sub-window's end are a level, not a flow: a real window ends with as
        # many in flight, not ``scale`` times as many.  Counted as a flow, the window after a launch
        # reported a quarter or more of its arrivals unfinished with an empty queue.
        in_flight = (s.scale - 1.0) * d.running_change if s.job.is_online else 0.0
        return observe(
            s.job,
            d.chain,
            st,
            self._weights(s, st.request_ids),
            window=(t0, t1),
            routed=routed,
            in_flight_change=in_flight,
            replicas_up=up,
            replicas_expected=d.expected,
            price_usd_per_h=len(d.held) * d.chain.price_usd_per_h,
            memory_pressure=d.feas.memory_pressure,
            batch_left=(remaining, done),
            cfg=self.cfg,
            tick_s=self.scenario.tick_s,
            replica_tpot_ms=_replica_tpots(d, st, self.cfg.min_replica_samples),
        )

    def _batch_source(self, s: JobState) -> Iterator[Request]:
        """Closed-loop batch requests while the job has unissued work (world count)."""
        return _BatchSource(self, s)


class _BatchSource:
    """The closed loop's request iterator: batches of 256 drawn from the job's rng.

    A class, not a generator, so a world holding a running batch job can be pickled (the
    simulated fleet of ``koi agent`` saves its world after every launch).  It draws exactly
    what the generator it replaces drew: the profile is fixed at the first request, a batch is
    drawn only while work is unissued, and once the work runs out the source stays exhausted.
    """

    __slots__ = ("_batch", "_done", "_next", "_shared", "_w", "job", "world")

    def __init__(self, world: Serving, job: JobState) -> None:
        self.world, self.job = world, job
        self._w: WorkloadProfile | None = None
        self._shared = 0
        self._batch: list[tuple[int, int, int]] = []
        self._next = 0
        self._done = False

    def __iter__(self) -> _BatchSource:
        return self

    def __next__(self) -> Request:
        s = self.job
        if self._w is None:
            self._w = s.actual
            self._shared = self._w.shared_prefix_tokens
        if self._done or s.unissued <= 0:
            self._done = True
            raise StopIteration
        if self._next >= len(self._batch):
            w, shared, n = self._w, self._shared, 256
            ins = sample_lengths(w.input_len, s.rng, n).tolist()
            outs = sample_lengths(w.output_len, s.rng, n).tolist()
            zipf = self.world.cfg.truth.prefix_zipf
            pres = prefix_ids(w, s.rng, n, zipf) if shared else [-1] * n
            self._batch = list(zip(ins, outs, pres, strict=True))
            self._next = 0
        x, y, p = self._batch[self._next]
        self._next += 1
        s.unissued -= s.scale
        s.issued_ids += 1
        rid = s.window * ID_BLOCK + s.issued_ids % ID_BLOCK
        return Request(rid, 0.0, x, y, p, self._shared if p >= 0 else 0)


def _drain_shares(
    deps: list[Deployment], mid: float, engine_s: float, arrivals: int
) -> dict[int, float]:
    """Per chain (by ``id``), the factor on its capacity weight that a router counting
    outstanding requests gives it this window: the window's work (the chains' queues plus the
    arrivals) is levelled over their capacity in the ``engine_s`` seconds the window replays,
    so a chain gets what its level leaves after its own queue (factor ``1 - queue / level``,
    0 when the queue alone is above it).  Empty when no serving chain has a queue."""
    cap = {id(d): d.up_at(mid) * d.capacity_req_s * engine_s for d in deps}
    queued = {id(d): d.engine.queued if d.engine is not None else 0 for d in deps}
    total_cap = sum(cap.values())
    if total_cap <= 0 or not any(queued[k] for k in cap if cap[k] > 0):
        return {}
    level = (sum(queued[k] for k in cap if cap[k] > 0) + arrivals) / total_cap
    return {
        k: max(level * c - queued[k], 0.0) / (level * c) if c > 0 else 1.0 for k, c in cap.items()
    }


def _replica_tpots(
    d: Deployment, st: WindowStats, min_samples: int
) -> tuple[tuple[str, float], ...]:
    """The median TPOT of each replica serving at the window's end that finished at least
    ``min_samples`` multi-token requests in it, by the replica's name."""
    out = []
    for rep in d.engine_reps:
        mine = st.tpot_ms[st.tpot_replica == rep.serial]
        if not rep.doomed and len(mine) >= min_samples:
            out.append((rep.name, float(np.median(mine))))
    return tuple(out)
