"""One required-rate rule, replica sizing from it (with the learned corrections), and planning
for the observed rate."""

from __future__ import annotations

import math

import attrs
import pytest

from koi.candidates import (
    Corrections,
    ProposerConfig,
    Screener,
    SizedOption,
    replicas_for,
    with_observed_rate,
)
from koi.catalog import load_catalog
from koi.surrogate import RankCorrection, Surrogate
from koi.types import (
    MIN_BATCH_WINDOW_S,
    Config,
    Environment,
    GpuSpec,
    Job,
    LengthDist,
    ServingTarget,
    WorkloadProfile,
)

CFG = ProposerConfig()


def _batch(total: int = 1000, done: int = 0, deadline_s: float = 3600.0) -> Job:
    workload = WorkloadProfile(
        LengthDist(500, 0.2, 2000), LengthDist(100, 0.2, 400), total_requests=total
    )
    return Job(
        "b",
        "Llama-3.1-8B",
        "batch",
        workload,
        ServingTarget.batch(deadline_s=deadline_s),
        completed_requests=done,
    )


def _online(rate: float = 4.0) -> Job:
    workload = WorkloadProfile(LengthDist(500, 0.2, 2000), LengthDist(200, 0.2, 800), rate_rps=rate)
    return Job(
        "o",
        "Llama-3.1-8B",
        "online",
        workload,
        ServingTarget.online(p99_ttft_ms=800.0, p99_tpot_ms=60.0),
    )


def test_the_required_rate_is_what_is_left_over_the_time_left() -> None:
    job = _batch(total=1000, done=400)
    assert job.required_output_tok_s(0.0) == pytest.approx(600 * 100 / 3600.0)
    assert job.required_output_tok_s(0.0, time_share=0.5) == pytest.approx(600 * 100 / 1800.0)
    # Near or past the deadline the window never shrinks below a minute.
    near = job.required_output_tok_s(3590.0)
    assert near == pytest.approx(600 * 100 / MIN_BATCH_WINDOW_S)
    assert job.required_output_tok_s(7200.0) == near
    assert _online(rate=4.0).required_output_tok_s(123.0) == pytest.approx(4.0 * 200)


def test_replicas_cover_the_required_rate_with_headroom() -> None:
    online = _online(rate=4.0)  # 800 tok/s offered
    n = replicas_for(online, 300.0, now_s=0.0, headroom=1.0, cfg=CFG)
    assert n == math.ceil(800 / (CFG.utilization_target * 300.0))
    assert replicas_for(online, 300.0, now_s=0.0, headroom=0.5, cfg=CFG) > n
    batch = _batch(total=100_000)
    late = replicas_for(batch, 100.0, now_s=3000.0, headroom=1.0, cfg=CFG)
    assert late > replicas_for(batch, 100.0, now_s=0.0, headroom=1.0, cfg=CFG)
    assert replicas_for(batch, 1e-3, now_s=0.0, headroom=1.0, cfg=CFG) == CFG.max_replicas


def test_a_drifted_job_is_planned_for_its_observed_rate_on_a_grid() -> None:
    job = _online(rate=4.0)
    assert with_observed_rate(job, None, tolerance=0.15) == job
    assert with_observed_rate(job, 4.4, tolerance=0.15) == job  # within the tolerance
    drifted = with_observed_rate(job, 6.0, tolerance=0.15)
    assert drifted.workload.rate_rps is not None
    assert 6.0 <= drifted.workload.rate_rps < 6.0 * 1.05 + 1e-9
    assert attrs.evolve(drifted, workload=job.workload) == job
    # The grid: nearby observations plan for the same rate (screens stay cached).
    assert with_observed_rate(job, 6.05, tolerance=0.15) == drifted
    assert with_observed_rate(_batch(), 99.0, tolerance=0.15) == _batch()


def _l40s() -> tuple[Environment, dict[str, GpuSpec]]:
    catalog = load_catalog()
    env = next(
        e for e in catalog.environments(clouds=["aws"]) if e.id.endswith("on_demand/g6e.xlarge")
    )
    return env, dict(catalog.gpus)


def _replicas(sized: list[SizedOption]) -> dict[Config, int]:
    return {s.option.config: s.replicas for s in sized}


@pytest.mark.parametrize("job", [_online(rate=16.0), _batch(total=200_000)])
def test_learned_corrections_size_more_replicas_and_the_memo_follows_them(job: Job) -> None:
    catalog = load_catalog()
    screener = Screener(Surrogate(catalog.gpus, catalog.models), CFG)
    env, gpus = _l40s()

    def slower(factor: float) -> Corrections:
        return lambda chain: RankCorrection(decode_time=factor)

    prior = screener.sized_options(job, [env], gpus, now_s=0.0)
    learned = screener.sized_options(job, [env], gpus, now_s=0.0, corrections=slower(1.3))
    assert prior
    assert _replicas(learned).keys() <= _replicas(prior).keys()
    more = [c for c, n in _replicas(learned).items() if n > _replicas(prior)[c]]
    assert more  # the slower stratum needs more replicas ...
    assert all(n >= _replicas(prior)[c] for c, n in _replicas(learned).items())  # ... never fewer
    by_config = {s.option.config: s for s in prior}
    for s in learned:  # ... because each replica is credited the corrected capacity
        assert s.option.capacity_tok_s < by_config[s.option.config].option.capacity_tok_s
    # A moved correction is a new sizing, not a stale memo; no evidence is the prior's.
    faster = screener.sized_options(job, [env], gpus, now_s=0.0, corrections=slower(0.7))
    assert sum(_replicas(faster).values()) < sum(_replicas(prior).values())
    identity = screener.sized_options(job, [env], gpus, now_s=0.0, corrections=slower(1.0))
    assert identity == prior
    assert screener.sized_options(job, [env], gpus, now_s=0.0) == prior
