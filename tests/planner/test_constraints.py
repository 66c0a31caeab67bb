"""Property: whatever the snapshot and telemetry, a committed plan satisfies C1–C5."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koi.config import KoiConfig
from koi.errors import KoiWarning
from koi.planner import Planner, TickResult
from koi.plugins import hookimpl
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    LengthDist,
    Mediators,
    Observation,
    Outcomes,
    Pool,
    Quant,
    Quota,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

from ._world import CATALOG

ENVS = [
    e
    for e in CATALOG.environments(clouds=["aws"], gpus=["L40S", "H100-SXM", "L4"])
    if e.region == "us-east-1"
][:8]
MODELS = ("Llama-3.2-1B", "Llama-3.1-8B", "Qwen3-8B")


@st.composite
def jobs(draw: st.DrawFn, k: int) -> Job:
    model = draw(st.sampled_from(MODELS))
    isl, osl = draw(st.sampled_from([(256, 64), (1024, 256), (4096, 128)]))
    lengths = (LengthDist(isl, 0.3, isl * 4), LengthDist(osl, 0.3, osl * 4))
    group = draw(st.sampled_from([None, "team-a", "team-b"]))
    priority = draw(st.integers(0, 2))
    if draw(st.booleans()):
        rate = draw(st.floats(0.2, 20.0))
        target = ServingTarget.online(
            p99_ttft_ms=draw(st.floats(200, 5000)), p99_tpot_ms=draw(st.floats(20, 200))
        )
        return Job(
            f"j{k}",
            model,
            "online",
            WorkloadProfile(*lengths, rate_rps=rate),
            target,
            quota_group=group,
            priority=priority,
        )
    total = draw(st.integers(10, 20_000))
    done = draw(st.integers(0, total))
    target = ServingTarget.batch(deadline_s=draw(st.floats(600, 20_000)))
    return Job(
        f"j{k}",
        model,
        "batch",
        WorkloadProfile(*lengths, total_requests=total),
        target,
        quota_group=group,
        priority=priority,
        completed_requests=done,
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    envs = draw(st.lists(st.sampled_from(ENVS), min_size=1, max_size=5, unique_by=lambda e: e.id))
    pools = [Pool(e, draw(st.integers(0, 3))) for e in envs]
    js = [draw(jobs(k)) for k in range(draw(st.integers(1, 5)))]
    free = {p.id: p.capacity_gpus for p in pools}
    active = []
    for job in js:
        if not draw(st.booleans()):
            continue
        pool = draw(st.sampled_from(pools))
        tp = draw(st.sampled_from([1, 2]))
        if pool.environment.gpus_per_instance % tp or free[pool.id] < tp:
            continue
        free[pool.id] -= tp
        chain = Chain(job.model, pool.environment, Config(tp=tp, quant=Quant.BF16))
        active.append(ActiveDeployment(job.id, Ladder((Rank(chain, 1),))))
    quotas = [Quota("team-a", draw(st.integers(0, 16)))] if draw(st.booleans()) else []
    return ClusterSnapshot(600.0, js, pools, active, quotas)


def _observation(draw: st.DrawFn, job_id: str, rank: Rank) -> Observation:
    lat = st.floats(0.0, 1e5) | st.just(math.inf)
    frac = st.floats(0.0, 1.0)
    return Observation(
        job_id=job_id,
        chain=rank.chain,
        start_s=300.0,
        end_s=600.0,
        requests=draw(st.integers(0, 5000)),
        completed=draw(st.integers(0, 5000)),
        replicas_up=draw(st.integers(0, rank.replicas)),
        outcomes=Outcomes(
            cost_per_mtok_usd=draw(lat),
            p99_ttft_ms=draw(lat),
            p99_tpot_ms=draw(lat),
            throughput_tok_s=draw(st.floats(0.0, 1e5)),
            slo_margin=draw(st.floats(-10, 1)),
        ),
        mediators=Mediators(
            kv_cache_util=draw(frac),
            mean_batch_size=draw(st.floats(0, 512)),
            queue_depth=draw(st.floats(0, 1e4)),
            mem_bw_util=draw(frac),
            compute_util=draw(frac),
            comm_share=draw(frac),
            bubble_fraction=draw(frac),
            preemption_rate=draw(st.floats(0, 100)),
            prefill_share=draw(frac),
            memory_pressure=draw(st.floats(0, 2)),
        ),
    )


class _GarbageTelemetry:
    """A telemetry source that sends NaN, negative and missing values."""

    koi_plugin_name = "garbage"

    @hookimpl
    def koi_collect_telemetry(self, ranks: object, window: tuple[float, float]) -> list[object]:
        return [
            {"job_id": "j0", "requests": -3},
            {"job_id": "j0", "outcomes": {"p99_ttft_ms": float("nan")}},
            None,
        ]


def check_constraints(planner: Planner, snapshot: ClusterSnapshot, result: TickResult) -> None:
    plan = result.plan
    assert {a.job_id for a in plan.actions} == {j.id for j in snapshot.jobs}
    capacity = {p.id: p.capacity_gpus for p in snapshot.pools}
    current = snapshot.current_ladders
    steady: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for a in plan.actions:
        for pool, gpus in a.ladder.gpus_by_pool().items():
            steady[pool] += gpus
        # make-before-break: a new chain comes up beside the old one; a scale-in frees at once
        if a.kind is ActionKind.RECONFIGURE:
            peak.update(a.ladder.switch_peak_by_pool(current[a.job_id]))
        else:
            peak.update(a.ladder.gpus_by_pool())
    for pool, used in peak.items():
        assert used <= capacity[pool], f"C1 {pool}: {used} > {capacity[pool]}"
    for a in plan.actions:  # C2 for every new ladder
        if a.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            for rank in a.ladder.ranks:
                assert planner.surrogate.feasibility(rank.chain).ok
    tau = planner.config.planner.tau
    free = Counter(capacity)
    for ladder in current.values():
        free.subtract(ladder.gpus_by_pool())
    best_effort: Counter[str] = Counter()  # GPUs best effort takes beyond its jobs' own
    room: Counter[str] = Counter({p: max(n, 0) for p, n in free.items()})
    for c in result.candidates:  # C3 for every chosen change but the best-effort ones
        if not c.chosen:
            continue
        held = current[c.job_id].gpus_by_pool() if c.job_id in current else {}
        if "make-room" in c.sources:  # a donor's scale-in or stop frees its GPUs for them
            new = c.ladder.gpus_by_pool()
            room.update({p: n - new.get(p, 0) for p, n in held.items() if n > new.get(p, 0)})
        if c.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE):
            if "best-effort" in c.sources:
                extra = {p: n - held.get(p, 0) for p, n in c.ladder.gpus_by_pool().items()}
                best_effort.update({p: n for p, n in extra.items() if n > 0})
            else:
                assert c.breach_probability <= tau
    for pool, used in best_effort.items():  # ...which take only GPUs nobody holds
        assert used <= room[pool], f"best effort on {pool}: {used} > {room[pool]}"
    moved = sum(a.kind is ActionKind.RECONFIGURE for a in plan.actions)
    assert moved <= result.knobs["swap_budget"]  # C4
    online = {j.id for j in snapshot.jobs if j.is_online}
    at_risk = {r.job_id for r in result.at_risk}
    for a in plan.actions:  # a service the plan leaves without a ladder is reported at risk
        assert a.job_id not in online or not a.ladder.is_empty or a.job_id in at_risk
    jobs = {j.id: j for j in snapshot.jobs}
    for quota in snapshot.quotas:  # C5 quotas
        used = sum(a.ladder.gpus for a in plan.actions if jobs[a.job_id].quota_group == quota.group)
        held = sum(current[j].gpus for j in current if jobs[j].quota_group == quota.group)
        assert used <= max(quota.max_gpus, held)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), snapshot=snapshots())
def test_committed_plans_satisfy_c1_to_c5(data: st.DataObject, snapshot: ClusterSnapshot) -> None:
    planner = Planner(config=KoiConfig(), catalog=CATALOG, plugins=[_GarbageTelemetry()])
    observations = [
        _observation(data.draw, a.job_id, rank)
        for a in snapshot.active
        for rank in a.ladder.ranks
        if data.draw(st.booleans())
    ]
    result = planner.tick(snapshot, observations)
    assert not result.fallback, result.errors
    check_constraints(planner, snapshot, result)
    # A second tick pulls the garbage telemetry from the plugin: skipped with a warning.
    later = ClusterSnapshot(900.0, snapshot.jobs, snapshot.pools, snapshot.active, snapshot.quotas)
    if later.active:
        with pytest.warns(KoiWarning):
            again = planner.tick(later)
    else:  # telemetry is only collected for deployed ranks
        again = planner.tick(later)
    check_constraints(planner, later, again)
