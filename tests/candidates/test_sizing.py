"""One required-rate rule, replica sizing from it, and planning for the observed rate."""

from __future__ import annotations

import math

import attrs
import pytest

from koi.candidates import ProposerConfig, replicas_for, with_observed_rate
from koi.types import MIN_BATCH_WINDOW_S, Job, LengthDist, ServingTarget, WorkloadProfile

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
