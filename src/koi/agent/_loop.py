"""The production control loop: every ``tick_s``, snapshot → telemetry → plan → launch →
checkpoint, with its state on ``/metrics``, ``/healthz`` and ``/status``."""

from __future__ import annotations

import signal
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from koi.agent._config import AgentConfig, load_plugin
from koi.agent._http import AgentServer
from koi.agent._log import JsonLog, clean
from koi.agent._metrics import AgentMetrics
from koi.errors import InvalidInput, KoiError
from koi.planner import Planner, TickResult
from koi.plugins import make_plugin_manager
from koi.types import ActionKind

__all__ = ["Abandoned", "Agent"]


class Abandoned(BaseException):
    """Raised into a running tick by a second stop signal: the tick is given up.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that no ``except Exception`` inside
    the planner turns it into a plan.  The checkpoint on disk is the last completed tick's.
    """


class Agent:
    """``koi agent``: runs a :class:`~koi.planner.Planner` over the plugins of an
    :class:`AgentConfig` until it is stopped.

    Parameters
    ----------
    config
        The parsed configuration.
    log
        Where structured log lines go (stderr by default).
    plugins
        Plugin objects to use instead of loading ``config.plugins`` (for embedding and tests).
    clock
        Wall-clock time (unix seconds), for ``/status`` and the tick schedule.

    .. versionadded:: 0.1
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        log: JsonLog | None = None,
        plugins: list[object] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.log = log or JsonLog()
        self.clock = clock
        self.metrics = AgentMetrics()  # fails early and clearly without prometheus-client
        if plugins is None:
            plugins = [load_plugin(spec, source=config.source) for spec in config.plugins]
        pm = make_plugin_manager(
            plugins=plugins, entry_points=config.entry_points, blocked=config.blocked
        )
        resumed = config.state is not None and config.state.exists()
        self.planner = Planner(config=config.koi, plugin_manager=pm, state_path=config.state)
        self.plugin_names = self.planner.host.plugin_names
        self.resumed_from = self.planner.state.tick if resumed else None
        self._stop = threading.Event()
        self._abandon = False
        self._in_tick = False
        self._lock = threading.Lock()
        self.started_at = clock()
        self.last: dict[str, Any] | None = None
        self.next_tick_at: float | None = None
        self.ticks_run = 0
        self.server: AgentServer | None = None
        self.metrics.dry_run.set(1 if config.dry_run else 0)
        self.metrics.tick.set(self.planner.state.tick)

    # -- lifecycle ----------------------------------------------------------------------------

    def serve(self) -> int:
        """Start the HTTP endpoints; return the port (useful with ``port = 0``)."""
        cfg = self.config
        try:
            self.server = AgentServer(
                cfg.host,
                cfg.port,
                metrics=self.metrics.render,
                health=self.health,
                status=self.status,
            )
        except OSError as exc:  # unresolvable host, port in use, no permission
            where = f"{cfg.source}: agent.host, agent.port"
            reason = exc.strerror or str(exc)
            raise InvalidInput(
                f"{where}: cannot listen on {cfg.host}:{cfg.port}: {reason}"
            ) from None
        self.server.start()
        return self.server.port

    def request_stop(self) -> None:
        """Stop after the current tick (a second request abandons it)."""
        if self._stop.is_set() and self._in_tick:
            self._abandon = True
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM / SIGINT: the first finishes the current tick and stops; a second one
        abandons the tick (the checkpoint stays the last completed tick's)."""

        def handler(signum: int, _frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            again = self._stop.is_set()
            self.request_stop()
            if again and self._in_tick:
                self.log.event("abandoning", level="warning", signal=name)
                raise Abandoned(name)
            when = "after the current tick" if self._in_tick else "now"
            self.log.event("stopping", signal=name, when=when)

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def run(self) -> int:
        """Tick every ``tick_s`` until stopped (or ``max_ticks`` ticks); return an exit code."""
        cfg = self.config
        self.log.capture()
        try:
            port = self.serve()
            self.log.event(
                "started",
                config=cfg.source,
                host=cfg.host,
                port=port,
                tick_s=cfg.tick_s,
                dry_run=cfg.dry_run,
                plugins=list(self.plugin_names),
                checkpoint=str(cfg.state) if cfg.state else None,
                resumed_from_tick=self.resumed_from,
            )
            while not self._stop.is_set():
                started = self.clock()
                try:
                    self.tick_once()
                except Abandoned:
                    self.log.event("tick_abandoned", level="warning", tick=self.planner.state.tick)
                    break
                if cfg.max_ticks and self.ticks_run >= cfg.max_ticks:
                    break
                self.next_tick_at = started + cfg.tick_s
                self.metrics.next_tick.set(self.next_tick_at)
                self._stop.wait(max(0.0, self.next_tick_at - self.clock()))
        finally:
            if self.server is not None:
                self.server.stop()
            self.log.event(
                "stopped",
                ticks_run=self.ticks_run,
                tick=self.planner.state.tick,
                checkpoint=str(cfg.state) if cfg.state else None,
            )
            self.log.release()
        return 0

    # -- one tick -----------------------------------------------------------------------------

    def tick_once(self) -> dict[str, Any]:
        """Run one tick and record it; never raises a :class:`KoiError` (the tick is skipped)."""
        cfg = self.config
        started = self.clock()
        t0 = time.perf_counter()
        self._in_tick = True
        try:
            online: set[str] = set()
            try:
                snapshot = self.planner.host.snapshot(self.clock())  # S0, from the plugins
                if snapshot is None:
                    raise InvalidInput("snapshot: no koi_snapshot plugin answered")
                online = {j.id for j in snapshot.jobs if j.is_online}
                result: TickResult | None = self.planner.tick(snapshot, launch=not cfg.dry_run)
                error = None
            except KoiError as exc:  # S0 failed: no fleet view, nothing changed or launched
                result, error = None, f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # an unexpected failure must not end the agent
                detail = traceback.format_exc(limit=4)
                result, error = None, f"internal error: {exc!r}\n{detail}"
        finally:
            self._in_tick = False
        total = time.perf_counter() - t0
        self.ticks_run += 1
        if result is None:
            record = self._skipped(started, total, error or "")
        else:
            record = self._committed(result, started, total, online)
        with self._lock:
            self.last = record
        self.metrics.last_tick.set(self.clock())
        self.metrics.tick.set(self.planner.state.tick)
        return record

    def _skipped(self, started: float, total: float, error: str) -> dict[str, Any]:
        self.metrics.ticks.labels("skipped").inc()
        self.metrics.plugin_errors.inc()
        self.metrics.tick_duration.labels("total").observe(total)
        self.log.event(
            "tick_skipped",
            level="error",
            tick=self.planner.state.tick,
            error=error,
            note="no plan was made or launched; the checkpoint is unchanged",
        )
        return {
            "outcome": "skipped",
            "started_at": started,
            "duration_s": total,
            "tick": self.planner.state.tick,
            "errors": [error],
            "plan": None,
        }

    def _committed(
        self, result: TickResult, started: float, total: float, online: set[str]
    ) -> dict[str, Any]:
        cfg, m = self.config, self.metrics
        plan = result.plan
        outcome = "fallback" if result.fallback else "ok"
        m.ticks.labels(outcome).inc()
        m.plans.inc()
        if result.fallback:
            m.fallbacks.inc()
        m.observe_stages(result.timings_s, total)
        kinds: dict[str, int] = {}
        for action in plan.actions:
            kinds[action.kind.value] = kinds.get(action.kind.value, 0) + 1
            m.actions.labels(action.kind.value).inc()
        m.plugin_errors.inc(len(result.errors))
        eps = result.knobs.get("epsilon")
        if eps is not None:
            m.epsilon.set(eps)
        cov = result.knobs.get("coverage")
        if cov is not None:
            m.coverage.set(cov)
        actions: list[dict[str, Any]] = []
        at_risk = 0
        for action in plan.actions:
            chosen = next((c for c in result.candidates_for(action.job_id) if c.chosen), None)
            breach = chosen.breach_probability if chosen is not None else None
            if breach is not None and breach >= cfg.at_risk_breach and not action.ladder.is_empty:
                at_risk += 1
            elif action.kind is ActionKind.DEFER and action.job_id in online:
                at_risk += 1  # an online job left unserved
            actions.append(
                {
                    "job_id": action.job_id,
                    "action": action.kind.value,
                    "ladder": action.ladder.summary(),
                    "reason": action.reason,
                    "breach_probability": breach,
                }
            )
        m.at_risk.set(at_risk)
        m.jobs.set(len(plan.actions))
        record = {
            "outcome": outcome,
            "started_at": started,
            "duration_s": total,
            "tick": self.planner.state.tick,
            "launched": not cfg.dry_run and not result.fallback,
            "selector": result.selector_status,
            "gap": result.gap,
            "errors": list(result.errors),
            "knobs": dict(result.knobs),
            "learning": {
                "compared": result.learning.compared,
                "q1_rate": result.learning.q1_rate,
                "coverage": result.learning.coverage,
                "divergences": list(result.learning.divergences),
                "mean_uncertainty": result.learning.mean_uncertainty,
                "mechanisms": result.learning.mechanisms,
            },
            "jobs_at_risk": at_risk,
            "timings_s": dict(result.timings_s),
            "plan": {"time_s": plan.time_s, "actions": actions},
        }
        self.log.event(
            "tick",
            level="warning" if result.fallback or result.errors else "info",
            tick=record["tick"],
            outcome=outcome,
            dry_run=cfg.dry_run,
            duration_s=round(total, 4),
            selector=result.selector_status,
            actions=kinds,
            jobs_at_risk=at_risk,
            errors=list(result.errors),
        )
        if cfg.dry_run:
            for a in actions:
                if a["action"] != ActionKind.KEEP.value:
                    self.log.event("advice", **{"tick": record["tick"], **a})
        return record

    # -- endpoints ----------------------------------------------------------------------------

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while ticks keep finishing: none is overdue by more than two periods plus
        the planner's deadlines."""
        now = self.clock()
        with self._lock:
            last = self.last
        cfg = self.config
        proposer_s = cfg.koi.planner.proposer_timeout_s or 0.0  # None: no deadline to wait out
        limit = 2 * cfg.tick_s + proposer_s * 4 + 60.0
        since = now - (last["started_at"] + last["duration_s"]) if last else now - self.started_at
        ok = since <= limit
        body = {
            "status": "ok" if ok else "stale",
            "seconds_since_last_tick": since,
            "last_outcome": last["outcome"] if last else None,
        }
        return ok, clean(body)

    def status(self) -> dict[str, Any]:
        with self._lock:
            last = self.last
        data = {
            "tick": self.planner.state.tick,
            "dry_run": self.config.dry_run,
            "started_at": self.started_at,
            "resumed_from_tick": self.resumed_from,
            "ticks_run": self.ticks_run,
            "next_tick_at": self.next_tick_at,
            "tick_s": self.config.tick_s,
            "plugins": list(self.plugin_names),
            "checkpoint": str(self.config.state) if self.config.state else None,
            "stopping": self._stop.is_set(),
            "last_tick": last,
        }
        result: dict[str, Any] = clean(data)
        return result
