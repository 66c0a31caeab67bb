"""The replay engine: requests routed over replicas that batch continuously.

Longer than most modules: the event loop, routing and window accounting share the engine's
state on the hot path; splitting them would cost attribute lookups in the innermost loop.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from koi.errors import InvalidInput
from koi.surrogate.replay._cache import CachedStepModel, StepCache, UncachedStepModel
from koi.surrogate.replay._config import ReplayConfig
from koi.surrogate.replay._replica import ReplicaSpec, _Replica, _Seq
from koi.surrogate.replay._request import Request
from koi.surrogate.replay._stats import WindowStats
from koi.types import Routing

__all__ = ["ReplayEngine", "run_closed_loop"]

_LOAD = operator.attrgetter("load")


class _Acc:
    """Accumulators of the open window.

    Time integrals over replica-seconds: ``busy`` (a block in flight), ``batch`` (running
    sequences), ``kv`` (KV fill fraction), ``prefill`` (prefill iterations), ``q_area`` (queue
    length); step time split into ``compute``, ``memory``, ``comm``, ``bubble`` (pipeline) and
    ``overhead``.  Counts: decode ``tokens``, ``preemptions``, ``rejected`` (could never fit),
    ``requeued`` (held back when replicas went away), ``arrivals``.  Per finished request:
    ``ttft`` and the ``f_*`` columns — id, arrival, first-token and end time, input and output
    tokens, and the serial of the replica it finished on.
    """

    __slots__ = (
        "arrivals",
        "batch",
        "bubble",
        "busy",
        "comm",
        "compute",
        "f_arr",
        "f_end",
        "f_entered",
        "f_first",
        "f_id",
        "f_in",
        "f_out",
        "f_rep",
        "kv",
        "memory",
        "overhead",
        "preemptions",
        "prefill",
        "prefix_hit",
        "prefix_query",
        "q_area",
        "rejected",
        "requeued",
        "tokens",
        "ttft",
    )

    def __init__(self) -> None:
        self.busy = self.batch = self.kv = self.prefill = self.q_area = 0.0
        self.compute = self.memory = self.comm = self.bubble = self.overhead = 0.0
        self.tokens = self.preemptions = self.rejected = self.requeued = self.arrivals = 0
        self.prefix_hit = self.prefix_query = 0
        self.ttft: list[float] = []
        self.f_id: list[int] = []
        self.f_arr: list[float] = []
        self.f_first: list[float] = []
        self.f_end: list[float] = []
        self.f_entered: list[float] = []
        self.f_in: list[int] = []
        self.f_out: list[int] = []
        self.f_rep: list[int] = []


class ReplayEngine:
    """Continuous-batching replay of requests over ``replicas``, in simulated time.

    Requests are submitted with arrival times (possibly in the future) and routed to a replica
    when they arrive: round robin over the current replicas, or to the replica with the fewest
    waiting plus running requests (ties to the lowest index), or (prefix affinity, for requests
    with a shared prefix) to the least-loaded replica that caches the prefix, within
    ``config.affinity_slack``.  A request that could never fit
    a replica's KV cache (``input + output > kv_capacity_tokens``) is rejected and counted.

    Each replica runs iterations back to back while it has work.  An iteration first gives one
    decode token to every decoding sequence, then spends the rest of the ``max_batched_tokens``
    budget on prefill slices: sequences already prefilling first, then new admissions from the
    head of the replica's queue while the batch has room and the KV cache can hold the new
    prompt (``input + generated`` tokens and the token it samples, keeping ``kv_watermark``
    free).  The last slice of a
    prompt samples the first output token.  When the next decode step would overflow the KV
    cache, the most recently admitted sequence is preempted: it returns to the head of the
    queue, keeps the tokens it generated, and recomputes prompt plus generated tokens when it is
    re-admitted (vLLM's recompute preemption).

    The engine is stateful: :meth:`advance` moves simulated time forward and returns what
    happened in the window; queues, running batches and KV contents persist across calls.

    Parameters
    ----------
    replicas
        One :class:`ReplicaSpec` per replica (may be empty: arrivals are held until a replica
        appears).
    routing
        :class:`~koi.types.Routing` policy.
    start_s
        Simulated time at which the engine starts.
    config
        :class:`ReplayConfig`.
    """

    def __init__(
        self,
        replicas: Sequence[ReplicaSpec],
        routing: Routing,
        *,
        start_s: float = 0.0,
        config: ReplayConfig | None = None,
    ) -> None:
        if not isinstance(routing, Routing):
            raise InvalidInput(f"routing: must be a Routing, got {routing!r}")
        if not math.isfinite(start_s):
            raise InvalidInput(f"start_s: must be finite, got {start_s!r}")
        self.config = config or ReplayConfig()
        self.routing = routing
        self._now = float(start_s)
        self._models: dict[int, StepCache] = {}
        self._reps: list[_Replica] = []
        self._held: list[_Seq] = []  # arrived while there was no replica
        self._arr: list[tuple[float, int, Request, bool]] = []
        self._order = 0
        self._uid = 0
        self._ver = 0
        self._rr = 0
        self._feed: Iterator[Request] | None = None
        self._q = 0  # requests waiting (replica queues and held)
        self._q_t = self._now
        self.acc = _Acc()
        # Block ends of all replicas; an entry is live while its replica's block ends there.
        self._ends: list[tuple[float, int, _Replica]] = []
        self._tie = 0
        self._serial = 0  # the next replica's serial
        for spec in replicas:
            self._reps.append(self._new_replica(spec))

    # -- public state ---------------------------------------------------------------------

    @property
    def now_s(self) -> float:
        """End of the last window (the engine's clock)."""
        return self._now

    @property
    def n_replicas(self) -> int:
        return len(self._reps)

    @property
    def replicas(self) -> tuple[ReplicaSpec, ...]:
        return tuple(r.spec for r in self._reps)

    @property
    def replica_serials(self) -> tuple[int, ...]:
        """Each replica's serial, in :attr:`replicas` order: numbered from 0 as the engine
        starts them, never reused (``WindowStats.tpot_replica`` names replicas by it)."""
        return tuple(r.serial for r in self._reps)

    @property
    def queued(self) -> int:
        """Requests that arrived and wait for admission (held ones included)."""
        return self._q

    @property
    def running(self) -> int:
        """Requests admitted to a batch (prefilling or decoding)."""
        return sum(len(r.running) for r in self._reps)

    @property
    def backlog(self) -> int:
        """Arrived but unfinished requests: queued plus running."""
        return self._q + self.running

    @property
    def iterations(self) -> int:
        """Engine iterations executed so far, summed over current replicas."""
        return sum(r.it for r in self._reps)

    def running_ids(self) -> list[int]:
        """Ids of the requests admitted to a batch and not finished."""
        return [seq.id for r in self._reps for seq in r.running.values()]

    @property
    def pending_arrivals(self) -> int:
        """Submitted requests whose arrival time has not been reached yet."""
        return len(self._arr)

    # -- inputs -----------------------------------------------------------------------------

    def submit(self, requests: Iterable[Request]) -> None:
        """Queue requests for arrival at their ``arrival_s``.

        A request whose arrival is before :attr:`now_s` arrives at the start of the next window;
        its latencies are still measured from its own ``arrival_s``.
        """
        new: list[tuple[float, int, Request, bool]] = []
        order = self._order
        for req in requests:
            if not (
                isinstance(req, Request)
                and math.isfinite(req.arrival_s)
                and isinstance(req.input_tokens, int)
                and isinstance(req.output_tokens, int)
                and req.input_tokens >= 1
                and req.output_tokens >= 1
            ):
                raise InvalidInput(
                    f"requests: need finite arrival_s and integer input/output tokens >= 1, "
                    f"got {req!r}"
                )
            new.append((req.arrival_s, order, req, False))
            order += 1
        self._order = order
        arr = self._arr
        if len(new) * 8 > len(arr):  # a big batch: one O(n) heapify beats n pushes
            arr.extend(new)
            heapq.heapify(arr)
        else:
            for item in new:
                heapq.heappush(arr, item)

    def feed(self, requests: Iterable[Request], concurrency: int) -> None:
        """Closed loop: keep ``concurrency`` requests from ``requests`` in flight.

        ``concurrency`` requests are issued at :attr:`now_s`; from then on, every fed request
        that finishes (or is rejected) issues the next one, until the source runs dry.  A
        request's own ``arrival_s`` is ignored: it is re-stamped with the time it is issued.
        Feeding again replaces the source and issues ``concurrency`` more, so the number in
        flight grows by ``concurrency`` (requests already issued stay in flight); feeding an
        empty iterable stops the loop.
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidInput(f"concurrency: must be an integer >= 1, got {concurrency!r}")
        self._feed = iter(requests)
        for _ in range(concurrency):
            if not self._issue(self._now):
                break

    def _issue(self, t: float) -> bool:
        if self._feed is None:
            return False
        req = next(self._feed, None)
        if req is None:
            self._feed = None
            return False
        if req.input_tokens < 1 or req.output_tokens < 1:
            raise InvalidInput(f"requests: need input/output tokens >= 1, got {req!r}")
        # Issued at t: the heap key is its arrival (advance reads arrivals from the key, so
        # the request is not rebuilt with a new arrival_s).
        heapq.heappush(self._arr, (t, self._order, req, True))
        self._order += 1
        return True

    # -- replicas -------------------------------------------------------------------------

    def _new_replica(self, spec: ReplicaSpec) -> _Replica:
        if not isinstance(spec, ReplicaSpec):
            raise InvalidInput(f"replicas: must be ReplicaSpec values, got {spec!r}")
        key = id(spec.step_model)
        model = self._models.get(key)
        if model is None:
            sm = spec.step_model
            if isinstance(sm, StepCache):  # a cache, shared with other engines
                model = sm
            elif self.config.cache_step_times:
                cfg = self.config
                model = CachedStepModel(
                    sm,
                    resolution=cfg.step_resolution,
                    floor_tokens=cfg.step_floor_tokens,
                    affine=cfg.step_affine,
                )
            else:
                model = UncachedStepModel(sm)
            self._models[key] = model
        self._serial += 1
        return _Replica(spec, model, self._now, self.config.kv_watermark, self._serial - 1)

    def add_replica(self, spec: ReplicaSpec) -> None:
        """Start one more replica at :attr:`now_s`; held requests are routed at once."""
        self._reps.append(self._new_replica(spec))
        self._route_held()

    def remove_replica(self, index: int) -> None:
        """Lose replica ``index`` at :attr:`now_s` (preemption, failure, scale-in).

        Its queued and running requests are routed again at once over the remaining replicas
        (held if none is left).  They keep their arrival time, their first-token time and the
        tokens they already generated; a running request restarts by recomputing its prompt
        plus generated tokens on its new replica (like a preemption), and a half-done prefill
        starts over.  Each counts in the next window's ``requeued``.
        """
        if not 0 <= index < len(self._reps):
            raise InvalidInput(f"index: must be in [0, {len(self._reps)}), got {index!r}")
        self._requeue([self._reps.pop(index)])

    def set_replicas(self, replicas: Sequence[ReplicaSpec]) -> None:
        """Replace the replica set at :attr:`now_s`.

        Position ``i`` keeps its running state when ``replicas[i]`` equals the current spec at
        ``i``; otherwise the old replica is removed (as by :meth:`remove_replica`) and a fresh
        one starts.  Extra old replicas are removed, extra new ones start empty.
        """
        old = self._reps
        new: list[_Replica] = []
        gone: list[_Replica] = []
        for i, spec in enumerate(replicas):
            if i < len(old) and old[i].spec == spec:
                new.append(old[i])
            else:
                if i < len(old):
                    gone.append(old[i])
                new.append(self._new_replica(spec))
        gone.extend(old[len(new) :])
        self._reps = new
        self._requeue(gone)

    def hand_over(self, to: ReplayEngine) -> int:
        """Move every unfinished open-loop request to ``to``, as a router re-sends a retired
        chain's requests to the chain that replaces it; returns how many moved.

        This engine's replicas are removed first (their requests requeue as by
        :meth:`remove_replica`), so it is left empty.  Held and future requests go to ``to``
        keeping their arrival, first-token time and generated tokens, and ``to`` routes them
        at once (at its own clock, which should equal this one's).  Closed-loop requests stay
        here, held: a closed loop's source re-issues what its engine lost.
        """
        if to is self:
            raise InvalidInput("to: an engine cannot hand its requests over to itself")
        gone, self._reps = self._reps, []
        self._requeue(gone)
        moved = [seq for seq in self._held if not seq.fed]
        self._held = [seq for seq in self._held if seq.fed]
        self.on_queue(self._now, -len(moved))
        future = [item for item in self._arr if not item[3]]
        self._arr = [item for item in self._arr if item[3]]
        heapq.heapify(self._arr)
        for seq in moved:
            to._uid += 1
            seq.uid = to._uid  # running requests are keyed by uid on their replica
            seq.entered = to._now
        to._held.extend(moved)
        to.acc.requeued += len(moved)
        to.on_queue(to._now, len(moved))
        to._route_held()
        to.submit(req for _, _, req, _ in future)
        return len(moved) + len(future)

    def _requeue(self, gone: list[_Replica]) -> None:
        now = self._now
        seqs: list[_Seq] = []
        for r in gone:
            self.on_queue(now, -len(r.waiting))
            seqs.extend(r.evacuate(now, self))
        seqs.sort(key=lambda s: (s.arrival, s.uid))
        self.acc.requeued += len(seqs)
        self._held.extend(seqs)
        self.on_queue(now, len(seqs))
        self._route_held()

    def _route_held(self) -> None:
        if not self._reps or not self._held:
            return
        held, self._held = self._held, []
        self.on_queue(self._now, -len(held))
        for seq in held:
            self._route(seq, self._now)

    # -- callbacks from replicas ------------------------------------------------------------

    def on_queue(self, t: float, delta: int) -> None:
        self.acc.q_area += self._q * (t - self._q_t)
        self._q_t = t
        self._q += delta

    def on_preempt(self, t: float) -> None:
        self.acc.preemptions += 1
        self.on_queue(t, 1)

    def on_finish(self, seq: _Seq, t: float, serial: int) -> None:
        acc = self.acc
        acc.f_rep.append(serial)
        acc.f_id.append(seq.id)
        acc.f_arr.append(seq.arrival)
        acc.f_first.append(seq.first)
        acc.f_end.append(t)
        acc.f_entered.append(seq.entered)
        acc.f_in.append(seq.inp)
        acc.f_out.append(seq.out)
        if seq.fed:
            self._issue(t)

    def schedule(self, r: _Replica) -> None:
        """Register the end of ``r``'s current block (older entries of ``r`` go stale)."""
        self._tie += 1
        heapq.heappush(self._ends, (r.p_e, self._tie, r))

    def next_version(self) -> int:
        self._ver += 1
        return self._ver

    # -- the event loop -------------------------------------------------------------------

    def _route(self, seq: _Seq, t: float) -> None:
        reps = self._reps
        if not reps:
            self._held.append(seq)
            self.on_queue(t, 1)
            return
        if self.routing is Routing.ROUND_ROBIN:
            r = reps[self._rr % len(reps)]
            self._rr += 1
        elif self.routing is Routing.PREFIX_AFFINITY and seq.pre >= 0 and len(reps) > 1:
            r = self._affine(seq.pre)
        else:
            # The first least-loaded: ties to the lowest index.
            r = reps[0] if len(reps) == 1 else min(reps, key=_LOAD)
        if seq.inp + seq.out > r.cap:
            self.acc.rejected += 1
            if seq.fed:
                self._issue(t)
            return
        was_empty = not r.waiting
        r.waiting.append(seq)
        r.load += 1
        self.acc.q_area += self._q * (t - self._q_t)  # on_queue(t, 1), inlined
        self._q_t = t
        self._q += 1
        if not r.p_on:
            r.plan(t, self)
        elif was_empty and r.p_k > 1 and len(r.running) < r.maxb:
            r.cut_for_arrival(t, self)

    def _affine(self, prefix: int) -> _Replica:
        """Cache-aware routing: the least-loaded replica that holds the prefix, unless it is
        more than ``config.affinity_slack`` requests busier than the least-loaded replica
        overall (which then caches the prefix too)."""
        best = low = self._reps[0]
        best_load = low_load = 1 << 62
        for x in self._reps:
            load = x.load
            if load < low_load:
                low, low_load = x, load
            if load < best_load and x.pc is not None and x.pc.holds(prefix):
                best, best_load = x, load
        return best if best_load <= low_load + self.config.affinity_slack else low

    def advance(self, until_s: float) -> WindowStats:
        """Simulate up to ``until_s`` and return what happened in ``(now_s, until_s]``.

        An iteration that starts before ``until_s`` and ends after it is split: its busy time
        and mediator integrals are shared between the windows pro rata, its tokens and
        finishes belong to the window where they happen.
        """
        if not until_s >= self._now or not math.isfinite(until_s):
            raise InvalidInput(f"until_s: must be finite and >= now_s ({self._now}), got {until_s}")
        start = self._now
        arr = self._arr
        ends = self._ends
        acc = self.acc
        heappop = heapq.heappop
        route = self._route
        inf = math.inf
        while True:
            while ends:
                e_min, _, r = ends[0]
                if r.p_on and r.p_e == e_min:
                    break
                heappop(ends)  # stale: the block was cut, committed or its replica removed
            else:
                e_min = inf
            t_a = arr[0][0] if arr else inf
            if t_a <= e_min:
                if t_a > until_s:
                    break
                _, _, req, fed = heappop(arr)
                acc.arrivals += 1
                self._uid += 1
                seq = _Seq(
                    self._uid,
                    req.id,
                    t_a,  # the heap key: the request's arrival_s, or when it was issued
                    req.input_tokens,
                    req.output_tokens,
                    fed,
                    req.prefix,
                    req.prefix_tokens,
                )
                route(seq, t_a if t_a > start else start)
            else:
                if e_min > until_s:
                    break
                heappop(ends)
                r.commit(self)
                r.plan(e_min, self)
        return self._close(start, until_s)

    def _close(self, start: float, until: float) -> WindowStats:
        for r in self._reps:
            r.close_window(until, self)
        self.on_queue(until, 0)
        acc = self.acc
        duration = until - start
        replica_s = len(self._reps) * duration
        per = replica_s if replica_s > 0 else duration
        # Ages of requests without a first token, in the same order as before (queues can
        # hold thousands under overload: comprehensions, not appends).
        ages = [until - seq.entered for seq in self._held if seq.first < 0.0]
        running = 0
        for r in self._reps:
            running += len(r.running)
            ages += [until - seq.entered for seq in r.waiting if seq.first < 0.0]
            ages += [until - seq.entered for seq in r.prefilling if seq.first < 0.0]
        f_first = np.array(acc.f_first, dtype=float)
        f_end = np.array(acc.f_end, dtype=float)
        f_out = np.array(acc.f_out, dtype=float)
        # The engine's own TPOT leaves out requests whose first token came from another one.
        multi = (f_out > 1) & (f_first >= np.array(acc.f_entered, dtype=float))
        tpot = (f_end[multi] - f_first[multi]) / (f_out[multi] - 1) * 1e3
        tpot_replica = np.array(acc.f_rep, dtype=float)[multi]
        stats = WindowStats(
            start_s=start,
            end_s=until,
            replica_s=replica_s,
            request_ids=acc.f_id,
            arrival_s=acc.f_arr,
            first_token_s=f_first,
            finish_s=f_end,
            input_tokens=acc.f_in,
            output_tokens=f_out,
            ttft_ms=acc.ttft,
            tpot_ms=tpot,
            tpot_replica=tpot_replica,
            unserved_age_ms=np.array(ages, dtype=float) * 1e3,
            arrivals=acc.arrivals,
            first_tokens=len(acc.ttft),
            output_tokens_generated=acc.tokens,
            preemptions=acc.preemptions,
            rejected=acc.rejected,
            requeued=acc.requeued,
            queued_end=self._q,
            running_end=running,
            kv_cache_util=_div(acc.kv, per),
            mean_batch_size=_div(acc.batch, per),
            queue_depth=_div(acc.q_area, per),
            preemption_rate=_div(acc.preemptions, per),
            busy_fraction=_div(acc.busy, per),
            prefill_share=_div(acc.prefill, acc.busy),
            busy_s=acc.busy,
            compute_s=acc.compute,
            memory_s=acc.memory,
            comm_s=acc.comm,
            bubble_s=acc.bubble,
            overhead_s=acc.overhead,
            prefix_hit_tokens=acc.prefix_hit,
            prefix_query_tokens=acc.prefix_query,
        )
        self.acc = _Acc()
        self._now = until
        return stats


def _div(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def run_closed_loop(
    replicas: Sequence[ReplicaSpec],
    routing: Routing,
    requests: Iterable[Request],
    concurrency: int,
    horizon_s: float,
    *,
    start_s: float = 0.0,
    warmup_s: float = 0.0,
    config: ReplayConfig | None = None,
) -> WindowStats:
    """Replay ``requests`` with ``concurrency`` in flight for ``horizon_s`` seconds.

    ``warmup_s`` of simulated time is run first and discarded, so the statistics describe the
    steady state rather than the ramp-up from an empty batch.
    """
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise InvalidInput(f"horizon_s: must be > 0, got {horizon_s!r}")
    if not (warmup_s >= 0 and math.isfinite(warmup_s)):
        raise InvalidInput(f"warmup_s: must be >= 0, got {warmup_s!r}")
    engine = ReplayEngine(replicas, routing, start_s=start_s, config=config)
    engine.feed(requests, concurrency)
    if warmup_s > 0:
        engine.advance(start_s + warmup_s)
    return engine.advance(start_s + warmup_s + horizon_s)
