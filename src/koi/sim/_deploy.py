"""One deployed chain of one job: its replicas and the replay engine that serves them.

Internal to the world.  World time ``x`` in the current window maps to engine time
``e0 + (x - t0) / scale``: a sampled window replays ``window / scale`` seconds at the true
arrival rate (docs/evaluation.md, "Sampled windows").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from koi.sim._merge import merge_windows
from koi.surrogate import Feasibility
from koi.surrogate.replay import ReplayEngine, ReplicaSpec, Request, WindowStats
from koi.types import Chain, GpuSpec, ModelSpec

__all__ = ["Deployment", "Replica"]


@attrs.define(eq=False)
class Replica:
    """One materialized replica: when it is up, whether it runs slow, when it vanishes."""

    ready_s: float
    slow: float = 1.0
    vanish_s: float | None = None  # world time it disappears (spot preemption, eviction)
    doomed: bool = False  # announced preemption: shown as gone, vanishes at the next tick
    in_engine: bool = False
    name: str = ""  # the host's name for it (per-replica telemetry, recycling)
    serial: int = -1  # the engine's name for it in per-request telemetry, once in the engine


SpecFactory = Callable[[float], ReplicaSpec]


@attrs.define(eq=False)
class Deployment:
    """A chain of a job with its materialized replicas and (once one is up) its engine."""

    chain: Chain
    gpu: GpuSpec
    model: ModelSpec
    feas: Feasibility
    spec_for: SpecFactory  # slow factor -> ReplicaSpec (shared spec objects share a cache)
    replicas: list[Replica]
    capacity_req_s: float  # true saturated requests/s of one replica (traffic split weight)
    engine: ReplayEngine | None = None
    engine_reps: list[Replica] = attrs.field(factory=list)  # aligned with the engine's list
    stop_s: float | None = None  # takes no new work from this world time on
    outgoing: bool = False  # replaced: drains and is discarded when its window ends
    feed: Iterator[Request] | None = None  # closed-loop source (batch jobs)
    concurrency_per_replica: int = 1
    parts: list[WindowStats] = attrs.field(factory=list)
    expected: int = 0  # replicas the planner's ladder showed when the window began
    # How many more requests the engine was running at the end of the last window than at
    # its start: a level, which the window's scale must not multiply (see ``_serve``).
    running_change: int = 0

    # -- replicas --------------------------------------------------------------------------

    @property
    def held(self) -> list[Replica]:
        """Replicas that hold capacity (launching, up, or announced-but-running)."""
        return [r for r in self.replicas if r.vanish_s is None or r.doomed]

    @property
    def shown(self) -> int:
        """Replicas the snapshot shows: held and not announced as preempted."""
        return sum(1 for r in self.replicas if r.vanish_s is None)

    @property
    def gpus(self) -> int:
        return len(self.held) * self.chain.gpus

    def up_at(self, x: float) -> int:
        """Replicas serving at world time ``x``."""
        if self.stop_s is not None and x >= self.stop_s:
            return 0
        return sum(
            1 for r in self.replicas if r.ready_s <= x and (r.vanish_s is None or x < r.vanish_s)
        )

    def ends_by(self, x: float) -> bool:
        """Whether the chain serves nothing after world time ``x``: stopped (replaced or
        finished) or every replica gone by then.  The next tick discards it."""
        if self.stop_s is not None and self.stop_s <= x:
            return True
        return all(r.vanish_s is not None and r.vanish_s <= x for r in self.replicas)

    def change_points(self) -> list[float]:
        """World times at which :meth:`up_at` may change."""
        out = [r.ready_s for r in self.replicas]
        out += [r.vanish_s for r in self.replicas if r.vanish_s is not None]
        if self.stop_s is not None:
            out.append(self.stop_s)
        return out

    def expected_in(self, t0: float, t1: float) -> int:
        """Replicas the planner may expect to serve in ``[t0, t1)``: up by ``t1``, not
        announced as preempted, not gone before ``t0``."""
        return sum(
            1
            for r in self.replicas
            if not r.doomed and r.ready_s < t1 and (r.vanish_s is None or r.vanish_s > t0)
        )

    def ready_by(self) -> float:
        """World time by which every non-vanishing replica is up (inf when none is held)."""
        times = [r.ready_s for r in self.replicas if r.vanish_s is None]
        return max(times) if times else float("inf")

    def drop_vanished(self, now: float) -> None:
        """Forget replicas that vanished by ``now`` (the engine's clock is at ``now``)."""
        for r in self.replicas:
            if r.vanish_s is not None and r.vanish_s <= now and r.in_engine:
                self._remove(r)
        self.replicas = [r for r in self.replicas if r.vanish_s is None or r.vanish_s > now]

    # -- the engine ------------------------------------------------------------------------

    def _ensure_engine(self, at: float) -> ReplayEngine:
        if self.engine is None:
            self.engine = ReplayEngine([], self.chain.config.routing, start_s=at)
        return self.engine

    def _advance(self, until: float) -> None:
        eng = self.engine
        if eng is not None and until > eng.now_s:
            self.parts.append(eng.advance(until))

    def _add(self, rep: Replica) -> None:
        eng = self.engine
        assert eng is not None
        eng.add_replica(self.spec_for(rep.slow))
        rep.serial = eng.replica_serials[-1]
        self.engine_reps.append(rep)
        rep.in_engine = True
        if self.feed is not None:
            eng.feed(self.feed, self.concurrency_per_replica)

    def _remove(self, rep: Replica) -> None:
        eng = self.engine
        assert eng is not None
        i = self.engine_reps.index(rep)
        eng.remove_replica(i)
        self.engine_reps.pop(i)
        rep.in_engine = False

    def hand_over(self, to: ReplayEngine) -> None:
        """Send every request this chain still holds to ``to``; it serves nothing more."""
        if self.engine is not None:
            self.engine.hand_over(to)
        for r in self.engine_reps:
            r.in_engine = False
        self.engine_reps = []

    def rebuild(self) -> None:
        """Re-create every replica's step model (after the truth changed): a rolling restart."""
        if self.engine is not None and self.engine_reps:
            self.engine.set_replicas([self.spec_for(r.slow) for r in self.engine_reps])
            for r, serial in zip(self.engine_reps, self.engine.replica_serials, strict=True):
                r.serial = serial

    def run_window(
        self,
        t0: float,
        t1: float,
        e0: float,
        scale: float,
        requests: list[Request],
        topup: int = 0,
    ) -> WindowStats | None:
        """Serve the window ``[t0, t1)``: submit ``requests`` (engine times), apply replica
        arrivals and departures in time order, and return the window's merged statistics
        (``None`` when no replica was up at any point).  ``topup`` more closed-loop requests
        are issued at the start when the deployment has a batch source."""

        def e(x: float) -> float:
            return e0 + (min(max(x, t0), t1) - t0) / scale

        events: list[tuple[float, int, Replica]] = []
        for r in self.replicas:
            if (
                not r.in_engine
                and r.ready_s < t1
                and (r.vanish_s is None or r.vanish_s > r.ready_s)
            ):
                events.append((max(r.ready_s, t0), 1, r))
            if r.vanish_s is not None and r.vanish_s < t1:
                events.append((max(r.vanish_s, t0), 0, r))
        events.sort(key=lambda ev: (ev[0], ev[1]))
        self.parts = []
        if self.engine is None:
            first = next((ev for ev in events if ev[1] == 1), None)
            if first is None:
                return None
            self._ensure_engine(e(first[0]))
        eng = self.engine
        assert eng is not None
        running_before = eng.running
        if requests:
            eng.submit(requests)
        if self.feed is not None and topup > 0 and self.engine_reps:
            eng.feed(self.feed, topup)
        for x, kind, rep in events:
            self._advance(e(x))
            if kind == 1 and not rep.in_engine:
                self._add(rep)
            elif kind == 0 and rep.in_engine:
                self._remove(rep)
        if self.stop_s is not None and self.feed is not None and self.stop_s < t1:
            self._advance(e(self.stop_s))
            self.feed = None
            eng.feed(iter(()), 1)  # closed loop ends: no new batch requests
        self._advance(e(t1))
        self.running_change = eng.running - running_before
        return merge_windows(self.parts) if self.parts else None
