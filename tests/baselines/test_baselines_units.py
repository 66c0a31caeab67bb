"""Unit tests of the baselines: safety checks, orderings, posteriors, budgets, the references."""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koi.baselines import (
    PLANNERS,
    ArmPosterior,
    BaselineConfig,
    Evolutionary,
    MilpTruth,
    Thompson,
    Toolkit,
    TruthProfiles,
    edf_key,
    fcfs_key,
    make_policy,
    safe_plan,
)
from koi.catalog import Catalog, load_catalog
from koi.config import KoiConfig
from koi.errors import InvalidInput
from koi.sim import build_world, reference_truth
from koi.surrogate import OperatorModel
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    JobAction,
    Ladder,
    LengthDist,
    Mediators,
    Observation,
    Outcomes,
    Rank,
    ServingTarget,
    WorkloadProfile,
)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def toolkit(catalog: Catalog) -> Toolkit:
    return Toolkit.build(catalog.gpus, catalog.models)


def _online(job_id: str, ttft: float, tpot: float, out: float = 100.0) -> Job:
    w = WorkloadProfile(LengthDist(500), LengthDist(out), rate_rps=1.0)
    return Job(
        job_id,
        "Llama-3.1-8B",
        "online",
        w,
        ServingTarget.online(p99_ttft_ms=ttft, p99_tpot_ms=tpot),
    )


def _batch(job_id: str, deadline_s: float) -> Job:
    w = WorkloadProfile(LengthDist(500), LengthDist(100), total_requests=100)
    return Job(job_id, "Llama-3.1-8B", "batch", w, ServingTarget.batch(deadline_s=deadline_s))


def test_edf_orders_online_by_tightness_then_batch_by_deadline() -> None:
    jobs = [_batch("b-late", 7200), _online("o-loose", 2000, 100), _batch("b-soon", 1200)]
    jobs.append(_online("o-tight", 300, 30))
    assert [j.id for j in sorted(jobs, key=edf_key)] == ["o-tight", "o-loose", "b-soon", "b-late"]
    arrivals = [attrs.evolve(_online(f"j{k}", 500, 50), arrival_s=float(10 - k)) for k in range(3)]
    assert [j.id for j in sorted(arrivals, key=fcfs_key)] == ["j2", "j1", "j0"]


def _smoke_world(seed: int = 0):  # type: ignore[no-untyped-def]
    world = build_world("smoke", seed=seed)
    world.begin_tick(0, 900.0)  # every job of smoke has arrived by 15 min
    return world


def test_safe_plan_turns_an_oversubscribed_plan_into_one_the_host_accepts(
    toolkit: Toolkit,
) -> None:
    world = _smoke_world()
    snap = world.snapshot()
    h100 = next(p for p in snap.pools if p.environment.gpu == "H100-SXM")
    chain = Chain("Llama-3.1-8B", h100.environment, Config(tp=8))
    greedy = {
        j.id: JobAction(
            j.id, ActionKind.PLACE, Ladder((Rank(attrs.evolve(chain, model=j.model), 1),))
        )
        for j in snap.jobs
    }
    raw = world.apply(
        safe_plan(snap, greedy, toolkit.surrogate)
    )  # one 8-GPU chain per job on one 8-GPU pool: only the first fits
    assert raw.rejected == ()
    assert raw.places <= 1


@settings(max_examples=20)
@given(st.data())
def test_safe_plans_are_never_rejected_by_the_host(data: st.DataObject) -> None:
    world = _smoke_world()
    snap = world.snapshot()
    tk = _TK
    actions = {}
    for job in snap.jobs:
        pool = data.draw(st.sampled_from(snap.pools))
        tp = data.draw(st.sampled_from((1, 2, 4, 8)))
        n = data.draw(st.integers(1, 6))
        quant = data.draw(st.sampled_from(("bf16", "fp8", "int4")))
        chain = Chain(job.model, pool.environment, Config(tp=tp, quant=quant))
        actions[job.id] = JobAction(job.id, ActionKind.PLACE, Ladder((Rank(chain, n),)))
    plan = safe_plan(snap, actions, tk.surrogate)
    result = world.apply(plan)
    assert result.rejected == ()
    assert result.places == sum(a.kind is ActionKind.PLACE for a in plan.actions)


_TK = Toolkit.build(load_catalog().gpus, load_catalog().models)


def test_arm_posterior_learns_successes_and_costs() -> None:
    post = ArmPosterior(1.0, 1.0, math.log(2.0), 0.5)
    for _ in range(20):
        post.observe(success=True, log_cost=math.log(1.0), obs_sd=0.3)
    assert post.a == 21.0
    assert post.b == 1.0
    assert abs(post.mu - 0.0) < 0.05
    assert post.sd < 0.1
    rng = np.random.default_rng(0)
    good = np.mean([post.sample(rng) for _ in range(200)])
    bad = ArmPosterior(1.0, 21.0, math.log(1.0), 0.05)
    assert good > 5 * np.mean([bad.sample(rng) for _ in range(200)])


def _observation(job_id: str, chain: Chain, *, ttft: float, tpot: float) -> Observation:
    return Observation(
        job_id=job_id,
        chain=chain,
        start_s=0.0,
        end_s=300.0,
        requests=100,
        completed=100,
        replicas_up=1,
        outcomes=Outcomes(1.0, ttft, tpot, 1000.0, 0.0),
        mediators=Mediators(0.5, 8.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.3, 0.5),
    )


def test_thompson_moves_away_from_an_arm_that_keeps_missing(catalog: Catalog) -> None:
    tk = Toolkit.build(catalog.gpus, catalog.models)
    world = _smoke_world()
    snap = world.snapshot()
    job = next(j for j in snap.jobs if j.id == "chat-8b")
    snap = ClusterSnapshot(snap.time_s, [job], snap.pools)
    policy = Thompson(tk, np.random.default_rng(1), BaselineConfig(thompson_switch_margin=0.0))
    first = policy.decide(snap, ()).action(job.id)
    assert first.kind is ActionKind.PLACE
    chain = first.ladder.ranks[0].chain
    running = ClusterSnapshot(snap.time_s, [job], snap.pools, [_active(job.id, first.ladder)])
    arm = policy.running[job.id]
    assert arm[:2] == (chain.environment.gpu, chain.config)
    bad = [_observation(job.id, chain, ttft=1e5, tpot=1e4) for _ in range(40)]
    plan = policy.decide(running, bad)
    assert policy.running[job.id] != arm
    post = policy.posteriors[job.id][arm]
    assert post.b >= 40
    assert plan.action(job.id).kind is ActionKind.RECONFIGURE


def test_thompson_arms_scale_the_replica_count(catalog: Catalog) -> None:
    tk = Toolkit.build(catalog.gpus, catalog.models)
    snap = _smoke_world().snapshot()
    job = next(j for j in snap.jobs if j.id == "chat-8b")
    snap = ClusterSnapshot(snap.time_s, [job], snap.pools)
    policy = Thompson(tk, np.random.default_rng(1))
    arms = policy._arms(job, snap)
    assert {m for _, _, m in arms} == {1.0, 1.5, 2.0}
    doubled = Thompson(
        tk, np.random.default_rng(1), BaselineConfig(thompson_replica_multipliers=(2.0,))
    )
    placed = doubled.decide(snap, ()).action(job.id).ladder
    arm = doubled.running[job.id]
    sized = doubled._arms(job, snap)[arm]
    assert arm[2] == 2.0
    assert placed.replicas == 2 * sized.replicas
    with pytest.raises(InvalidInput, match="thompson_replica_multipliers"):
        BaselineConfig(thompson_replica_multipliers=(0.5,))


def _active(job_id: str, ladder: Ladder):  # type: ignore[no-untyped-def]
    from koi.types import ActiveDeployment

    return ActiveDeployment(job_id, ladder)


def test_evolutionary_stays_within_its_surrogate_budget(catalog: Catalog) -> None:
    tk = Toolkit.build(catalog.gpus, catalog.models)
    cfg = BaselineConfig(evo_budget_per_job=3, evo_generations=5, evo_population=8)
    policy = Evolutionary(tk, np.random.default_rng(0), cfg)
    snap = _smoke_world().snapshot()
    plan = policy.decide(snap, ())
    # Each job's budget is spent on proposals and resizes; a tick never exceeds it (the
    # running ladders are scored outside the budget, none run here).
    assert 0 < policy.last_calls <= 3 * len(snap.jobs)
    assert any(a.kind is ActionKind.PLACE for a in plan.actions)
    big = Evolutionary(tk, np.random.default_rng(0), BaselineConfig(evo_generations=5))
    big.decide(snap, ())
    assert big.last_calls > policy.last_calls


_SHAPE: dict[str, Any] = {
    "prefill_tokens": 0,
    "prefill_pairs": 0.0,
    "decode_seqs": 16,
    "decode_context_tokens": 8000,
}


def test_milp_truth_sees_the_truth_and_follows_driver_updates(catalog: Catalog) -> None:
    world = build_world("smoke", seed=3)
    reference = make_policy("milp-truth", catalog=catalog, seed=3, world=world)
    assert isinstance(reference, MilpTruth)
    gpu, model = catalog.gpus["L4"], catalog.models["Llama-3.1-8B"]
    config = Config()
    truth = reference_truth(world)
    step = TruthProfiles(truth).step_model(gpu, model, config).step(**_SHAPE).time_s
    mine = reference.toolkit.surrogate.step_model(gpu, model, config)[0].step(**_SHAPE).time_s
    prior = OperatorModel(gpu, model, config).step(**_SHAPE).time_s
    assert mine == pytest.approx(step)
    assert abs(mine / prior - 1) > 0.02  # the truth is not the prior
    reference._advance(15 * 60.0)  # smoke: L4 driver update to 0.8x speed at 15 min
    later = reference.toolkit.surrogate.step_model(gpu, model, config)[0].step(**_SHAPE).time_s
    assert later == pytest.approx(mine / 0.8, rel=1e-6)


def test_make_policy_names_and_errors(catalog: Catalog) -> None:
    for name in PLANNERS:
        if name in ("milp-truth", "koi-truth"):
            continue
        assert make_policy(name, catalog=catalog, seed=0).name == name
    for reference in ("milp-truth", "koi-truth"):
        with pytest.raises(InvalidInput, match="needs the world"):
            make_policy(reference, catalog=catalog)
    with pytest.raises(InvalidInput, match="LLM"):
        make_policy("llm-only", catalog=catalog)
    with pytest.raises(InvalidInput, match="unknown"):
        make_policy("nope", catalog=catalog)


def test_every_baseline_recycles_a_replica_slow_two_windows_running(catalog: Catalog) -> None:
    world = _smoke_world()
    snap = world.snapshot()
    job = snap.jobs[0]
    chain = Chain(job.model, snap.pools[0].environment, Config())
    active = [_active(job.id, Ladder((Rank(chain, 3),)))]
    running = ClusterSnapshot(snap.time_s, [job], snap.pools, active)
    slow = attrs.evolve(
        _observation(job.id, chain, ttft=100.0, tpot=30.0),
        replicas_up=3,
        replica_tpot_ms={"a": 20.0, "b": 21.0, "c": 60.0},
    )
    planner = attrs.evolve(KoiConfig().planner, slow_replica_ratio=1.5)
    recycling = KoiConfig(planner=planner)  # koi's knob switches every planner's reflex
    kept = []
    for name in PLANNERS:
        if name.startswith("koi") or name == "milp-truth":  # koi's own; the truth needs a world
            continue
        policy = make_policy(name, catalog=catalog, seed=0, config=recycling)
        first = policy.decide(running, [slow]).action(job.id)  # one slow window: a burst?
        action = policy.decide(running, [slow]).action(job.id)
        assert not first.recycle, name
        if action.kind is ActionKind.KEEP:
            assert action.recycle == ("c",), name
            kept.append(name)
    assert {"fcfs", "edf"} <= set(kept)
    off = make_policy("fcfs", catalog=catalog)  # koi's default: no recycling, for anyone
    for _ in range(2):
        assert not any(a.recycle for a in off.decide(running, [slow]).actions)
