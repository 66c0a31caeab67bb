"""Worlds for planner tests.

``World`` applies plans instantly and reports what the surrogate predicts under a hidden
``RankCorrection``: a closed-form truth in koi's own correction form, used only for the
mechanics of the tick (exploration, swap budget, checkpoints, drift, errors).  Learning is
shown against the simulated fleet instead (``sim_world`` and ``drive``): its truth is the
measured world of ``koi.sim``, which no koi correction reproduces exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from koi.catalog import load_catalog
from koi.config import KoiConfig
from koi.dag import default_dag
from koi.planner import Planner
from koi.planner._corrections import SharedCorrections
from koi.planner._evaluate import EvaluationMemo, Evaluator
from koi.planner._state import PlannerState
from koi.sim import World as SimWorld
from koi.surrogate import RankCorrection, Surrogate
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Job,
    LengthDist,
    Observation,
    Plan,
    Pool,
    ServingTarget,
    WorkloadProfile,
)

CATALOG = load_catalog()
#: One closed-form surrogate for the tests that screen with it (it only memoizes).
SURROGATE = Surrogate(CATALOG.gpus, CATALOG.models)
TICK_S = 300.0


def pools(
    *, per_pool: int = 2, gpus: Sequence[str] = ("H100-SXM", "L40S", "A100-80GB")
) -> list[Pool]:
    envs = CATALOG.environments(clouds=["aws"], markets=["on_demand"], gpus=list(gpus))
    seen: set[str] = set()
    out = []
    for env in envs:
        key = f"{env.gpu}/{env.gpus_per_instance}"
        if key in seen or env.region != "us-east-1":
            continue
        seen.add(key)
        out.append(Pool(env, per_pool))
    return out


def unhurried_planner(cfg: KoiConfig | None = None) -> Planner:
    """A planner with ``cfg`` (default: koi's defaults) and no tick or proposer deadline, so
    that a slow test machine cannot change what it decides."""
    cfg = cfg or KoiConfig()
    planner = attrs.evolve(cfg.planner, tick_deadline_s=None, proposer_timeout_s=None)
    return Planner(config=attrs.evolve(cfg, planner=planner))


def catalog_evaluator(
    snapshot: ClusterSnapshot,
    state: PlannerState,
    cfg: KoiConfig,
    *,
    cost_scale: float = 0.2,
    cost_scales: Mapping[str, float] | None = None,
    memo: EvaluationMemo | None = None,
    shared: SharedCorrections | None = None,
) -> Evaluator:
    """S5's evaluator on the catalog, the default causal graph and the shared surrogate; every
    job's cost scale ``cost_scale`` unless ``cost_scales`` names it; ``memo`` and ``shared``
    are the evaluation memo and corrections it reuses across ticks (none by default)."""
    return Evaluator(
        snapshot=snapshot,
        state=state,
        surrogate=SURROGATE,
        gpus=CATALOG.gpus,
        models=CATALOG.models,
        dag=default_dag(),
        cfg=cfg,
        reference_cost={j.id: cost_scale for j in snapshot.jobs} | dict(cost_scales or {}),
        shared_corrections=shared,
        memo=memo,
    )


def chat_job(job_id: str = "chat", *, rate: float = 6.0, model: str = "Llama-3.1-8B") -> Job:
    workload = WorkloadProfile(
        LengthDist(1024, 0.3, 4096), LengthDist(200, 0.3, 1024), rate_rps=rate
    )
    return Job(
        id=job_id,
        model=model,
        job_class="online",
        workload=workload,
        target=ServingTarget.online(p99_ttft_ms=1500, p99_tpot_ms=60),
    )


@attrs.define
class World:
    """Applies plans instantly and reports telemetry from a hidden truth."""

    jobs: list[Job]
    pools: list[Pool]
    truth: Callable[[Chain], RankCorrection]
    time_s: float = 0.0
    active: dict[str, ActiveDeployment] = attrs.field(factory=dict)
    surrogate: Surrogate = attrs.field(factory=lambda: Surrogate(CATALOG.gpus, CATALOG.models))

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(self.time_s, self.jobs, self.pools, list(self.active.values()))

    def apply(self, plan: Plan) -> None:
        for a in plan.actions:
            if a.ladder.is_empty:
                self.active.pop(a.job_id, None)
            elif a.job_id not in self.active or self.active[a.job_id].ladder != a.ladder:
                self.active[a.job_id] = ActiveDeployment(a.job_id, a.ladder, self.time_s)

    def advance(self) -> list[Observation]:
        """One window of telemetry for every active rank, then move the clock."""
        start, end = self.time_s, self.time_s + TICK_S
        out = []
        for job in self.jobs:
            dep = self.active.get(job.id)
            if dep is None:
                continue
            pred = self.surrogate.predict(job, dep.ladder, now_s=start, corrections=self.truth)
            for rp in pred.ranks:
                requests = int((job.workload.rate_rps or 0.0) * rp.traffic_share * TICK_S)
                out.append(
                    Observation(
                        job_id=job.id,
                        chain=rp.rank.chain,
                        start_s=start,
                        end_s=end,
                        requests=requests,
                        completed=requests,
                        replicas_up=rp.rank.replicas,
                        outcomes=rp.outcomes,
                        mediators=rp.mediators,
                    )
                )
        self.time_s = end
        return out


# --- learning against the simulated fleet's truth ----------------------------------------------

_SIM_SCENARIO = """
[scenario]
name = "learn"
duration_h = 2
tick_s = 300

[[pools]]
cloud = "aws"
region = "us-east-1"
market = "on_demand"
instance_type = "g6e.xlarge"
instances = {instances}

[[jobs]]
id = "chat"
model = "Llama-3.1-8B"
class = "online"
# INT4 allowed: these learning tests need a prior that is wrong, and INT4 is where it errs most.
precisions = ["bf16", "fp8", "int4"]
input = {{ mean = 1024, cv = 0.3, max = 4096 }}
output = {{ mean = 200, cv = 0.3, max = 1024 }}
arrival = "poisson"
rate_rps = {rate}
p99_ttft_ms = 1500
p99_tpot_ms = {tpot}
{events}
"""


@attrs.define
class Sim:
    """A one-pool, one-job measured world (``koi.sim``) and its tick counter.  Its truth is
    the simulated hardware, not the surrogate with a correction, so what a planner learns
    here is learned from it."""

    world: SimWorld
    k: int = 0
    divergences: list[str] = attrs.field(factory=list)  # CUSUM flags of every tick

    def run(
        self, planner: object, ticks: int, obs: Sequence[Observation] = ()
    ) -> list[Observation]:
        """``ticks`` planning ticks of ``planner`` (a ``koi.planner.Planner``)."""
        observations = list(obs)
        w = self.world
        sc = w.scenario
        for _ in range(ticks):
            t = self.k * sc.tick_s
            w.begin_tick(self.k, t)
            result = planner.tick(w.snapshot(), observations)  # type: ignore[attr-defined]
            assert not result.fallback, result.errors
            self.divergences.extend(result.learning.divergences)
            w.apply(result.plan)
            w.preempt_unannounced()
            observations, _ = w.serve(min(t + sc.tick_s, sc.duration_s))
            self.k += 1
        return observations


def sim_world(
    *, seed: int = 0, rate: float = 6.0, instances: int = 8, tpot: float = 150, events: str = ""
) -> Sim:
    from koi.sim import build_world, parse_scenario

    text = _SIM_SCENARIO.format(instances=instances, rate=rate, tpot=tpot, events=events)
    return Sim(build_world(parse_scenario(text, source="learn.toml"), seed=seed))
