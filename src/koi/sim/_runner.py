"""The bench runner: one policy through one scenario for one seed (DESIGN §10)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs

from koi.errors import InvalidInput
from koi.sim._config import SimConfig
from koi.sim._evaluate import Metrics, evaluate, time_series
from koi.sim._policy import Policy
from koi.sim._scenario import Scenario, load_scenario
from koi.sim._trace import TickRecord, Trace
from koi.sim._truth import PriorFactory
from koi.sim._world import World
from koi.types import GpuSpec, ModelSpec, Observation, Plan, Pool

__all__ = ["RunResult", "build_world", "run"]


@attrs.frozen
class RunResult:
    """Metrics, time series and the full trace of one run.

    ``wall_s`` is the run's wall time (planning included); ``speedup`` simulated seconds per
    wall second.
    """

    scenario: str
    policy: str
    seed: int
    metrics: Metrics
    series: Mapping[str, tuple[float, ...]]
    trace: Trace
    wall_s: float

    @property
    def speedup(self) -> float:
        return self.trace.duration_s / self.wall_s if self.wall_s > 0 else math.inf

    def to_dict(self, *, with_trace: bool = False) -> dict[str, Any]:
        """JSON-ready summary (non-finite numbers become ``None``)."""

        def clean(x: Any) -> Any:
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list | tuple):
                return [clean(v) for v in x]
            return x

        out: dict[str, Any] = {
            "scenario": self.scenario,
            "policy": self.policy,
            "seed": self.seed,
            "wall_s": self.wall_s,
            "speedup": self.speedup,
            "metrics": attrs.asdict(self.metrics),
            "series": dict(self.series),
        }
        if with_trace:
            out["trace"] = attrs.asdict(self.trace)
        return clean(out)  # type: ignore[no-any-return]


def _catalog_maps(
    gpus: Mapping[str, GpuSpec] | None, models: Mapping[str, ModelSpec] | None
) -> tuple[Mapping[str, GpuSpec], Mapping[str, ModelSpec], tuple[Any, ...]]:
    from koi.catalog import load_catalog

    cat = load_catalog()
    return (
        cat.gpus if gpus is None else gpus,
        cat.models if models is None else models,
        tuple(cat.instances),
    )


def resolve_pools(scenario: Scenario, instances: tuple[Any, ...]) -> tuple[Pool, ...]:
    """The scenario's pools, resolved against catalog instance types; errors name the pool."""
    out = []
    for k, spec in enumerate(scenario.pools):
        try:
            out.append(spec.resolve(instances))
        except InvalidInput as exc:
            raise InvalidInput(f"{scenario.name}: pools[{k}].{exc}") from None
    return tuple(out)


def build_world(
    scenario: Scenario | str | Path,
    *,
    seed: int = 0,
    cfg: SimConfig | None = None,
    gpus: Mapping[str, GpuSpec] | None = None,
    models: Mapping[str, ModelSpec] | None = None,
    prior: PriorFactory | None = None,
) -> World:
    """A fresh :class:`World` for ``scenario`` and ``seed`` (GPUs/models default to the catalog)."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    g, m, instances = _catalog_maps(gpus, models)
    pools = resolve_pools(sc, instances)
    return World(sc, seed=seed + sc.seed_salt, gpus=g, models=m, pools=pools, cfg=cfg, prior=prior)


def run(
    scenario: Scenario | str | Path,
    policy: Policy,
    *,
    seed: int = 0,
    progress: TextIO | None = None,
    cfg: SimConfig | None = None,
    gpus: Mapping[str, GpuSpec] | None = None,
    models: Mapping[str, ModelSpec] | None = None,
) -> RunResult:
    """Run ``policy`` through ``scenario`` with ``seed`` and evaluate it.

    Each tick: due events and hazards, a snapshot, ``policy.decide(snapshot, observations)``
    (timed: the planning time), the safety checks and launches of :meth:`World.apply`, then the
    window until the next tick, whose telemetry the policy sees next.  Deterministic given
    ``(scenario, seed, policy)`` when the policy is.  ``progress`` (e.g. ``sys.stderr``) gets
    one line per tick.
    """
    wall0 = time.perf_counter()
    world = build_world(scenario, seed=seed, cfg=cfg, gpus=gpus, models=models)
    sc = world.scenario
    ticks: list[TickRecord] = []
    observations: tuple[Observation, ...] = ()
    n = sc.ticks
    for k in range(n):
        t = k * sc.tick_s
        end = min(t + sc.tick_s, sc.duration_s)
        notes = world.begin_tick(k, t)
        snapshot = world.snapshot()
        t_plan = time.perf_counter()
        decided: object = policy.decide(snapshot, observations)
        plan_s = time.perf_counter() - t_plan
        if not isinstance(decided, Plan):
            kind = type(decided).__name__
            msg = f"policy {policy.name!r}: decide() must return a Plan, got {kind}"
            raise InvalidInput(msg)
        plan = decided
        applied = world.apply(plan)
        notes += applied.recycled
        notes += world.preempt_unannounced()
        cost, by_type = world.cost_and_gpus(end - t)
        obs, windows = world.serve(end)
        observations = tuple(obs)
        ticks.append(
            TickRecord(
                index=k,
                start_s=t,
                end_s=end,
                plan_time_s=plan_s,
                swaps=applied.swaps,
                keeps=applied.keeps,
                places=applied.places,
                stops=applied.stops,
                rejected=applied.rejected,
                gpus_by_type=by_type,
                cost_usd=cost,
                jobs=tuple(windows),
                events=tuple(notes),
            )
        )
        if progress is not None:
            gp = sum(w.slo_tokens for w in windows) / (end - t)
            print(
                f"[{sc.name} {policy.name} seed={seed}] tick {k + 1}/{n} t={t / 3600:.2f}h "
                f"gpus={sum(by_type.values())} goodput={gp:.0f} tok/s plan={plan_s:.3f}s",
                file=progress,
                flush=True,
            )
    trace = Trace(
        scenario=sc.name,
        policy=policy.name,
        seed=seed,
        duration_s=sc.duration_s,
        online_jobs=tuple(j.id for j in sc.online_jobs),
        ticks=tuple(ticks),
        batch=world.batch_records(),
        reference_cost_per_token_usd=world.reference_cost_per_token_usd,
        in_flight=world.in_flight(),
    )
    return RunResult(
        scenario=sc.name,
        policy=policy.name,
        seed=seed,
        metrics=evaluate(trace),
        series=time_series(trace),
        trace=trace,
        wall_s=time.perf_counter() - wall0,
    )
