"""The world's memos answer what a fresh computation answers, and are keyed on all they read.

Each test here fails if its memo is keyed on too little (the second question would get the
first one's answer) or goes stale (a driver update would not reach a memoised capacity).
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from koi.sim import MeasuredTruth, build_world
from koi.sim._capacity import reference_cost_per_token
from koi.sim._measured import MeasuredStepModel
from koi.sim._world import World
from koi.surrogate import feasibility
from koi.surrogate.replay import CachedStepModel, ReplayEngine, ReplicaSpec, Request, StepTime
from koi.types import Chain, Config, Environment, Job, Market, Routing


def _env(gpu: str, gpi: int, instance: str) -> Environment:
    return Environment("aws", "us-east-1", Market.ON_DEMAND, instance, gpu, gpi, 10.0 * gpi)


def _feasible_chain(world: World, job: Job) -> Chain:
    for pool in world.pools():
        chain = Chain(job.model, pool.environment, Config(tp=1))
        if world._feasibility(chain).ok and world.true_capacity(chain, job.workload) > 0:
            return chain
    raise AssertionError("no feasible single-GPU chain")


def _longer_prompts(job: Job, job_id: str) -> Job:
    w = job.workload
    longer = attrs.evolve(w.input_len, mean=3.0 * w.input_len.mean, max=8 * w.input_len.max)
    return attrs.evolve(job, id=job_id, workload=attrs.evolve(w, input_len=longer))


def test_reference_cost_keys_capacities_on_the_workload() -> None:
    world = build_world("hetero-3h", seed=0)
    job = next(j for j in world.scenario.jobs if j.is_online)
    other = _longer_prompts(job, "same-model-longer-prompts")
    pools = tuple(world._pools.values())

    def ref(jobs: list[Job]) -> float:
        duration = world.scenario.duration_s
        return reference_cost_per_token(
            jobs, pools, world.gpus, world.models, world.true_capacity, duration_s=duration
        )

    one, two = ref([job]), ref([other])
    assert one != two  # longer prompts cost more per output token
    # Both jobs offer the same output tokens: the mix is the mean of the two.
    assert ref([job, other]) == pytest.approx((one + two) / 2, rel=1e-12)


def test_a_memoised_capacity_follows_driver_updates() -> None:
    world = build_world("hetero-3h", seed=0)
    job = next(j for j in world.scenario.jobs if j.is_online)
    chain = _feasible_chain(world, job)
    before = world.true_capacity(chain, job.workload)
    gpu = chain.environment.gpu
    world._truth.driver_update(gpu, np.random.default_rng(0), speed=0.5)
    world._generation[gpu] += 1  # what the world's driver-update event does
    after = world.true_capacity(chain, job.workload)
    assert after == world._capacity_of(chain, job.workload)
    assert after == pytest.approx(before / 2, rel=0.01)


def test_step_models_are_shared_per_chain_and_only_per_chain() -> None:
    world = build_world("hetero-3h", seed=0)
    g, m = world.gpus["H100-SXM"], world.models["Llama-3.1-8B"]
    truth = MeasuredTruth(3)
    a = truth.step_model(g, m, Config(), environment=_env("H100-SXM", 8, "box-a"))
    assert truth.step_model(g, m, Config(), environment=_env("H100-SXM", 8, "box-a")) is a
    # Another instance type draws its own host CPU and clocks: its own model.
    b = truth.step_model(g, m, Config(), environment=_env("H100-SXM", 8, "box-b"))
    slow = truth.step_model(g, m, Config(), environment=_env("H100-SXM", 8, "box-a"), slow=2.0)
    fresh = MeasuredTruth(3).step_model(g, m, Config(), environment=_env("H100-SXM", 8, "box-b"))

    def at(model: MeasuredStepModel) -> float:
        st = model.step(
            prefill_tokens=0, prefill_pairs=0.0, decode_seqs=16, decode_context_tokens=9000
        )
        return st.time_s

    assert at(b) == at(fresh)
    assert at(a) != at(b)
    assert slow is not a
    assert at(slow) / at(a) > 1.5


class _StepOnly:
    """A step model without ``step_parts``: the cache builds its nodes from StepTime values."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        return self.inner.step(  # type: ignore[attr-defined, no-any-return]
            prefill_tokens=prefill_tokens,
            prefill_pairs=prefill_pairs,
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )


def test_step_cache_nodes_from_parts_are_the_nodes_from_steps() -> None:
    world = build_world("hetero-3h", seed=1)
    g, m = world.gpus["A100-80GB"], world.models["Llama-3.1-8B"]
    truth = MeasuredTruth(1)
    model = truth.step_model(g, m, Config(tp=2), environment=_env("A100-80GB", 8, "box"))
    fast = CachedStepModel(model, resolution=0.1)
    plain = CachedStepModel(_StepOnly(model), resolution=0.1)
    for t, p, n, c in [(0, 0.0, 1, 300.0), (0, 0.0, 77, 51_234.0), (1, 0.5, 0, 0.0),
                       (512, 131_072.0, 3, 2_000.0), (3_000, 4.1e6, 200, 250_000.0)]:  # fmt: skip
        assert fast.mixed(t, p, n, c) == plain.mixed(t, p, n, c)
    assert fast._nodes == plain._nodes


def test_replica_loads_track_their_queues_through_finishes_and_losses() -> None:
    world = build_world("hetero-3h", seed=0)
    g, m = world.gpus["H100-SXM"], world.models["Llama-3.1-8B"]
    config = Config()
    fe = feasibility(g, m, config)
    step = CachedStepModel(MeasuredTruth(0).step_model(g, m, config))
    spec = ReplicaSpec(step, 4_000, 16, 2_048)  # a small KV cache: preemptions
    assert fe.ok
    eng = ReplayEngine([spec, spec, spec], Routing.LEAST_LOADED)
    rng = np.random.default_rng(5)
    reqs = [
        Request(i, float(t), int(x), int(y))
        for i, (t, x, y) in enumerate(
            zip(
                np.sort(rng.uniform(0, 20, 400)),
                rng.integers(50, 1_500, 400),
                rng.integers(5, 400, 400),
                strict=True,
            )
        )
    ]
    eng.submit(reqs)
    stats = []
    for until in (5.0, 9.0, 12.0, 60.0, 400.0):
        if until == 12.0:
            eng.remove_replica(1)
        stats.append(eng.advance(until))
        for r in eng._reps:
            assert r.load == len(r.waiting) + len(r.running)
    assert sum(s.preemptions for s in stats) > 0
    assert sum(s.requeued for s in stats) > 0
    assert sum(len(s.request_ids) for s in stats) > 300
