"""The agent's Prometheus metrics, on a registry of its own (never the global one)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from koi.errors import InvalidInput

__all__ = ["AgentMetrics"]

_STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        msg = "koi agent serves /metrics with prometheus-client: pip install 'koi[agent]'"
        raise InvalidInput(msg) from None
    return prometheus_client


class AgentMetrics:
    """Tick durations by stage, plans, actions by kind, fallbacks, ε, coverage, jobs at risk."""

    def __init__(self) -> None:
        pc = _client()
        self._pc = pc
        self.registry = pc.CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tick_duration = pc.Histogram(
            "koi_agent_tick_duration_seconds",
            "Wall time of each tick stage (S0..S7 as the planner times them, and 'total').",
            ["stage"],
            buckets=_STAGE_BUCKETS,
            registry=r,
        )
        self.ticks = pc.Counter(
            "koi_agent_ticks", "Ticks by outcome: ok, fallback, skipped.", ["outcome"], registry=r
        )
        self.plans = pc.Counter(
            "koi_agent_plans", "Plans committed (advisory ones included).", registry=r
        )
        self.actions = pc.Counter(
            "koi_agent_actions", "Actions in committed plans, by kind.", ["kind"], registry=r
        )
        self.fallbacks = pc.Counter(
            "koi_agent_fallbacks", "Ticks that committed the safe fallback plan.", registry=r
        )
        self.plugin_errors = pc.Counter(
            "koi_agent_tick_errors",
            "Errors reported by ticks (plugins, solver, skipped telemetry).",
            registry=r,
        )
        self.epsilon = pc.Gauge(
            "koi_agent_epsilon", "The risk band's calibrated epsilon.", registry=r
        )
        self.coverage = pc.Gauge(
            "koi_agent_coverage", "Realized coverage of the risk band (NaN before any).", registry=r
        )
        self.at_risk = pc.Gauge(
            "koi_agent_jobs_at_risk",
            "Jobs whose committed ladder's breach probability is at least agent.at_risk_breach, "
            "plus online jobs left deferred.",
            registry=r,
        )
        self.jobs = pc.Gauge("koi_agent_jobs", "Jobs in the last snapshot.", registry=r)
        self.tick = pc.Gauge(
            "koi_agent_tick",
            "The planner's tick counter (resumes from the checkpoint).",
            registry=r,
        )
        self.last_tick = pc.Gauge(
            "koi_agent_last_tick_timestamp_seconds",
            "When the last tick finished (unix time).",
            registry=r,
        )
        self.next_tick = pc.Gauge(
            "koi_agent_next_tick_timestamp_seconds",
            "When the next tick starts (unix time).",
            registry=r,
        )
        self.dry_run = pc.Gauge("koi_agent_dry_run", "1 in advisory mode (--dry-run).", registry=r)
        for outcome in ("ok", "fallback", "skipped"):
            self.ticks.labels(outcome)

    def observe_stages(self, timings: Mapping[str, float], total: float) -> None:
        for stage, seconds in sorted(timings.items()):
            if math.isfinite(seconds) and seconds >= 0:
                self.tick_duration.labels(stage).observe(seconds)
        self.tick_duration.labels("total").observe(total)

    def render(self) -> tuple[bytes, str]:
        return self._pc.generate_latest(self.registry), self._pc.CONTENT_TYPE_LATEST
