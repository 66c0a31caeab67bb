"""Telemetry that measures part of the variables, or measures them coarsely.

A real source (Prometheus over vLLM) has no compute utilisation or pipeline bubbles, and reads
p99s from histogram buckets.  What was not measured must not be learned from (a placeholder 0
would read as a huge miss), and a miss that the bucket's width can explain is not evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import pytest

from koi.errors import InvalidInput
from koi.planner import Planner
from koi.planner._learn import correction_fn
from koi.planner._observe import with_served_tokens
from koi.types import Job, Mediator, Mediators, Observation, Resolution, from_data, to_data

from ._world import World, chat_job, pools
from .test_tick import SLOW

UNMEASURED = (
    "mem_bw_util",
    "compute_util",
    "comm_share",
    "bubble_fraction",
    "prefill_share",
    "memory_pressure",
    "kv_cache_util",
    "slo_margin",
)


def _prometheus_like(o: Observation) -> Observation:
    """What a vLLM-metrics source gives: no utilisations, placeholders of 0 for them."""
    zeros = {m.value: 0.0 for m in Mediator if m.value in UNMEASURED}
    mediators = attrs.evolve(o.mediators, **zeros)
    return attrs.evolve(
        o,
        mediators=mediators,
        outcomes=attrs.evolve(o.outcomes, slo_margin=0.0),
        missing=UNMEASURED,
    )


def _coarse_tpot(o: Observation) -> Observation:
    """The p99 TPOT read from a bucket ten times wider than the value."""
    v = o.outcomes.p99_tpot_ms
    return attrs.evolve(o, resolution=(Resolution("p99_tpot_ms", 0.0, 10 * v),))


def _run(
    planner: Planner, world: World, ticks: int, edit: Callable[[Observation], Observation]
) -> None:
    observations: Sequence[Observation] = ()
    for _ in range(ticks):
        result = planner.tick(world.snapshot(), [edit(o) for o in observations])
        assert not result.fallback, result.errors
        world.apply(result.plan)
        observations = world.advance()


def _tpot_error(planner: Planner, world: World, job: Job) -> float:
    ladder = world.active[job.id].ladder
    corr = correction_fn(
        planner.state, job, gpus=planner.gpus, models=planner.models, cfg=planner.config
    )
    mine = planner.surrogate.predict(job, ladder, corrections=corr).outcomes.p99_tpot_ms
    true = world.surrogate.predict(job, ladder, corrections=world.truth).outcomes.p99_tpot_ms
    return abs(mine - true) / true


def _world() -> World:
    return World([chat_job()], pools(gpus=("L40S",)), truth=lambda _c: SLOW)


def test_unmeasured_variables_are_not_learned_from() -> None:
    world, planner = _world(), Planner()
    _run(planner, world, 5, _prometheus_like)
    learned = {variable for _stratum, variable in planner.state.detectors}
    assert learned, "the measured variables were learned from"
    assert not learned & set(UNMEASURED)
    assert {"p99_tpot_ms", "queue_depth", "mean_batch_size"} <= learned
    # ... and the measured ones still correct the surrogate.
    assert _tpot_error(planner, world, world.jobs[0]) < 0.2


def test_placeholders_read_as_data_would_have_diverged() -> None:
    """The control: the same zeros without ``missing`` are taken for real (and are wrong)."""
    world, planner = _world(), Planner()
    _run(planner, world, 5, lambda o: attrs.evolve(_prometheus_like(o), missing=()))
    assert {v for _s, v in planner.state.detectors} & set(UNMEASURED)


def test_a_miss_inside_the_bucket_is_not_evidence() -> None:
    exact_world, exact = _world(), Planner()
    _run(exact, exact_world, 6, lambda o: o)
    coarse_world, coarse = _world(), Planner()
    _run(coarse, coarse_world, 6, _coarse_tpot)
    job = exact_world.jobs[0]
    assert _tpot_error(exact, exact_world, job) < 0.2  # exact p99s teach the 1.6x slowdown
    assert _tpot_error(coarse, coarse_world, job) > 0.3  # a 10x-wide bucket cannot


def test_observation_validates_missing_and_resolution() -> None:
    world = _world()
    world.apply(Planner().tick(world.snapshot()).plan)
    o = world.advance()[0]
    with pytest.raises(InvalidInput, match="unknown variable"):
        attrs.evolve(o, missing=("p99_latency",))
    with pytest.raises(InvalidInput, match="listed as missing"):
        attrs.evolve(o, missing=("p99_tpot_ms",), resolution=(Resolution("p99_tpot_ms", 1, 2),))
    with pytest.raises(InvalidInput, match="high: must be >= low"):
        Resolution("p99_ttft_ms", 5.0, 1.0)
    partial = _coarse_tpot(_prometheus_like(o))
    assert partial.measured("kv_cache_util") is None
    assert partial.measured(Mediator.QUEUE_DEPTH) == o.mediators.queue_depth
    assert from_data(to_data(partial), Observation) == partial
    assert isinstance(partial.mediators, Mediators)


def _tensorrt_like(o: Observation) -> Observation:
    """What TensorRT-LLM 1.2's metrics give: latencies and request counts, no token counter."""
    return attrs.evolve(
        o,
        outcomes=attrs.evolve(o.outcomes, throughput_tok_s=0.0, cost_per_mtok_usd=0.0),
        missing=("throughput_tok_s", "cost_per_mtok_usd"),
    )


def test_served_tokens_are_estimated_from_completions_where_none_were_counted() -> None:
    world = _world()
    world.apply(Planner().tick(world.snapshot()).plan)
    o = world.advance()[0]
    assert o.completed > 0
    job = world.jobs[0]
    (got,) = with_served_tokens([_tensorrt_like(o)], world.jobs)
    window = o.end_s - o.start_s
    assert got.measured("throughput_tok_s") == o.completed * job.workload.output_len.mean / window
    assert got.measured("cost_per_mtok_usd") is None  # a price over an estimate: left out
    # Measured throughputs, windows with no completions and jobs no longer known stay as given.
    idle = attrs.evolve(_tensorrt_like(o), completed=0)
    gone = attrs.evolve(_tensorrt_like(o), job_id="finished")
    assert with_served_tokens([o, idle, gone], world.jobs) == [o, idle, gone]


def test_a_rank_without_a_token_counter_still_teaches_its_throughput() -> None:
    world, planner = _world(), Planner()
    _run(planner, world, 5, _tensorrt_like)
    learned = {variable for _stratum, variable in planner.state.detectors}
    assert "throughput_tok_s" in learned
    assert "cost_per_mtok_usd" not in learned
