"""A tiny synthetic world for planner tests: the truth is the surrogate with distorted steps.

Observations are what the surrogate predicts under a hidden ``RankCorrection`` (e.g. decode
steps 1.6x slower than the prior), so tests know exactly what the planner should learn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from koi.catalog import load_catalog
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
