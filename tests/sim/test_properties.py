"""Properties: whatever a policy asks for, the world never exceeds its pools; the composite
rewards SLO-compliant tokens and penalises cost."""

from __future__ import annotations

import math
from collections import Counter

import attrs
from hypothesis import example, given, settings
from hypothesis import strategies as st

from koi.sim import JobWindow, Metrics, TickRecord, Trace, build_world, evaluate
from koi.types import ActionKind, Chain, Config, JobAction, Ladder, Plan, Quant, Rank

from .conftest import online_job_toml, pool_toml, tiny

SCENARIO = tiny(
    pool_toml(instances=3, gpus_per_instance=2, gpu="L40S", price=3.0)
    + pool_toml(instance="big", instances=1, gpus_per_instance=8, price=30.0)
    + pool_toml(instance="spot", instances=4, market="spot", preemption=30.0)
    + online_job_toml(job_id="a", rate=3)
    + online_job_toml(job_id="b", model="Qwen3-8B", rate=2, arrival_min=5)
    + online_job_toml(job_id="c", model="Llama-3.2-1B", rate=6),
    minutes=25,
)

ranks = st.tuples(
    st.integers(0, 2),  # pool
    st.sampled_from([1, 2, 4, 8]),  # tp
    st.sampled_from(list(Quant)),
    st.integers(1, 6),  # replicas
)
plans = st.lists(
    st.dictionaries(
        st.sampled_from(["a", "b", "c", "ghost"]),
        st.one_of(st.none(), st.lists(ranks, min_size=1, max_size=2)),
    ),
    min_size=5,
    max_size=5,
)


@settings(max_examples=25)
@given(script=plans, seed=st.integers(0, 1000))
# A swap that cannot make-before-break on a pool with an announced preemption: the old
# replicas, doomed ones included, must release their instances at once.
@example(script=[{}, {"c": [(2, 1, Quant.BF16, 2)]}, {"c": [(2, 1, Quant.FP8, 1)]}, {}, {}], seed=1)
def test_world_never_exceeds_capacity(script: list[dict[str, object]], seed: int) -> None:
    world = build_world(SCENARIO, seed=seed)
    models = {"a": "Llama-3.1-8B", "b": "Qwen3-8B", "c": "Llama-3.2-1B", "ghost": "Llama-3.1-8B"}
    for k, wish in enumerate(script):
        world.begin_tick(k, k * 300.0)
        snap = world.snapshot()
        actions = []
        for job_id, spec in wish.items():
            if spec is None:
                actions.append(JobAction(job_id, ActionKind.DEFER))
                continue
            chains = {}
            for pool, tp, quant, n in spec:  # type: ignore[attr-defined]
                env = snap.pools[pool].environment
                chains[Chain(models[job_id], env, Config(tp=tp, quant=quant))] = n
            ladder = Ladder(tuple(Rank(c, n) for c, n in chains.items()))
            actions.append(JobAction(job_id, ActionKind.PLACE, ladder))
        world.apply(Plan(snap.time_s, actions))
        world.preempt_unannounced()
        after = world.snapshot()
        use: Counter[str] = Counter()
        for ladder in after.current_ladders.values():
            use.update(ladder.gpus_by_pool())
        for pool in after.pools:
            need = math.ceil(use[pool.id] / pool.environment.gpus_per_instance)
            assert need <= pool.capacity_instances
        world.serve(min((k + 1) * 300.0, SCENARIO.duration_s))


windows = st.builds(
    JobWindow,
    job_id=st.sampled_from(["a", "b"]),
    offered=st.floats(0, 1e4),
    offered_tokens=st.floats(0, 1e6),
    finished=st.floats(0, 1e4),
    ttft_ok=st.floats(0, 1e4),
    tpot_ok=st.floats(0, 1e4),
    slo_tokens=st.floats(0, 1e6),
    gpus=st.integers(0, 64),
)


def _metrics(jobs: list[JobWindow], cost: float) -> Metrics:
    tick = TickRecord(0, 0.0, 300.0, 0.01, 0, 0, 0, 0, (), {}, cost, tuple(jobs))
    return evaluate(Trace("t", "p", 0, 300.0, ("a", "b"), (tick,), (), 1e-6))


@given(
    jobs=st.lists(windows, min_size=1, max_size=6),
    cost=st.floats(1.0, 1e4),
    extra=st.floats(1.0, 1e5),
)
def test_more_slo_tokens_never_lower_the_composite_and_more_cost_never_raises_it(
    jobs: list[JobWindow], cost: float, extra: float
) -> None:
    base = _metrics(jobs, cost)
    richer = [attrs.evolve(jobs[0], slo_tokens=jobs[0].slo_tokens + extra), *jobs[1:]]
    assert _metrics(richer, cost).composite >= base.composite - 1e-9
    assert _metrics(jobs, 2.0 * cost).composite <= base.composite + 1e-9
