"""The evaluator's formulas on hand-made traces (DESIGN §10.3)."""

from __future__ import annotations

import math

import attrs
import pytest

from koi.sim import (
    BatchRecord,
    JobWindow,
    TickRecord,
    Trace,
    evaluate,
    online_admission,
    time_series,
)


def _tick(
    i: int, jobs: tuple[JobWindow, ...], *, cost: float = 10.0, plan: float = 0.1
) -> TickRecord:
    return TickRecord(
        index=i,
        start_s=i * 100.0,
        end_s=(i + 1) * 100.0,
        plan_time_s=plan,
        swaps=1,
        keeps=2,
        places=0,
        stops=0,
        rejected=("x: rejected",) if i == 0 else (),
        gpus_by_type={"H100-SXM": 8, "L4": 2},
        cost_usd=cost,
        jobs=jobs,
    )


def _trace(batch_done: float | None = 150.0) -> Trace:
    a = JobWindow(
        "a",
        offered=100,
        offered_tokens=10_000,
        finished=90,
        ttft_ok=80,
        tpot_ok=70,
        slo_ok=60,
        slo_tokens=6_000,
        output_tokens=9_000,
    )
    b = JobWindow("b", offered=100, offered_tokens=10_000)
    c = JobWindow("c", finished=10, batch_completed=10, output_tokens=1_000)
    batch = BatchRecord(
        "c",
        requested=20,
        requested_tokens=2_000,
        completed_by_deadline=10,
        done_s=batch_done,
        deadline_s=180.0,
        admitted=True,
        output_tokens=2_000,
    )
    return Trace(
        scenario="t",
        policy="p",
        seed=0,
        duration_s=200.0,
        online_jobs=("a", "b"),
        ticks=(_tick(0, (a, b, c)), _tick(1, (a, b, c), plan=0.3)),
        batch=(batch,),
        reference_cost_per_token_usd=1e-4,
    )


def test_requests_running_at_the_end_are_neither_served_nor_refused() -> None:
    trace = attrs.evolve(_trace(), in_flight={"a": 20.0, "c": 5.0})
    m = evaluate(trace)
    assert m.online_admission == pytest.approx((180 / 180 + 0.0) / 2)
    assert m.ttft_attainment == pytest.approx(160 / 380)
    assert m.batch_progress == pytest.approx(0.5)  # batch jobs are not online: untouched


def test_metrics_follow_the_definitions() -> None:
    m = evaluate(_trace())
    assert m.online_admission == pytest.approx((180 / 200 + 0.0) / 2)  # b never served
    assert m.batch_admission == 1.0
    assert m.batch_progress == pytest.approx(0.5)
    assert m.ttft_attainment == pytest.approx(160 / 400)  # unserved b counts as misses
    assert m.tpot_attainment == pytest.approx(140 / 400)
    assert m.deadline_attainment == 1.0
    assert m.slo_tokens == 12_000 + 2_000
    assert m.goodput_tok_s == pytest.approx(14_000 / 200)
    assert m.offered_tok_s == pytest.approx((40_000 + 2_000) / 200)
    assert m.cost_usd == 20.0
    assert m.cost_per_slo_token_usd == pytest.approx(20 / 14_000)
    q = (0.4 + 0.35 + 1.0) / 3
    c = (0.45 + 1.0 + 0.5) / 3
    e = math.sqrt((70 / 210) * min(1.0, 1e-4 / (20 / 14_000)))
    assert m.quality == pytest.approx(q)
    assert m.coverage == pytest.approx(c)
    assert m.efficiency == pytest.approx(e)
    assert m.composite == pytest.approx(100 * (q * c * e) ** (1 / 3))
    assert (m.swaps, m.keeps, m.rejected_actions) == (2, 4, 1)
    assert m.plan_time_median_s == pytest.approx(0.2)


def test_missed_deadline_earns_no_batch_goodput() -> None:
    m = evaluate(_trace(batch_done=190.0))
    assert m.deadline_attainment == 0.0
    assert m.slo_tokens == 12_000


def test_serving_nothing_scores_zero() -> None:
    idle = JobWindow("a", offered=100, offered_tokens=1_000)
    t = Trace("t", "p", 0, 100.0, ("a",), (_tick(0, (idle,), cost=0.0),), (), 1e-4)
    m = evaluate(t)
    assert m.online_admission == 0.0
    assert m.goodput_tok_s == 0.0
    assert m.cost_per_slo_token_usd == math.inf
    assert m.composite == 0.0


def test_time_series() -> None:
    s = time_series(_trace())
    assert s["time_s"] == (0.0, 100.0)
    assert s["goodput_tok_s"] == (60.0, 60.0)
    assert s["ttft_attainment"] == (0.4, 0.4)  # b offered 100 and served none
    assert s["gpus:H100-SXM"] == (8.0, 8.0)
    assert s["cost_usd_per_h"] == (360.0, 360.0)
    assert s["plan_time_s"] == (0.1, 0.3)


def test_a_job_served_for_one_window_is_not_admitted() -> None:
    """Online admission is served / offered requests per job, not "ever served"."""
    served = JobWindow("a", offered=100, offered_tokens=1_000, finished=100)
    refused = JobWindow("a", offered=100, offered_tokens=1_000)
    ticks = tuple(_tick(i, (served if i == 0 else refused,)) for i in range(10))
    m = evaluate(Trace("t", "p", 0, 1000.0, ("a",), ticks, (), 1e-4))
    assert m.online_admission == pytest.approx(0.1)


def test_online_admission_is_a_mean_over_jobs() -> None:
    # A busy job does not outweigh a small one; nothing offered leaves a job out.
    share = online_admission({"a": 1000.0, "b": 0.0, "c": 0.0}, {"a": 1000.0, "b": 10.0, "c": 0})
    assert share == pytest.approx(0.5)
    assert online_admission({}, {}) == 1.0
    assert online_admission({"a": 150.0}, {"a": 100.0}) == 1.0  # a backlog finishing later


def test_refusing_a_job_lowers_quality_coverage_and_goodput_share() -> None:
    """What docs/evaluation.md states: refusing never raises Q, C or goodput / offered."""
    a = JobWindow(
        "a",
        offered=100,
        offered_tokens=10_000,
        finished=100,
        ttft_ok=90,
        tpot_ok=90,
        slo_ok=90,
        slo_tokens=9_000,
        output_tokens=10_000,
    )
    b_served = JobWindow(
        "b",
        offered=100,
        offered_tokens=10_000,
        finished=100,
        ttft_ok=10,
        tpot_ok=10,
        slo_ok=10,
        slo_tokens=1_000,
        output_tokens=10_000,
    )
    b_refused = JobWindow("b", offered=100, offered_tokens=10_000)
    serve = evaluate(
        Trace("t", "p", 0, 100.0, ("a", "b"), (_tick(0, (a, b_served), cost=20.0),), (), 1e-4)
    )
    refuse = evaluate(
        Trace("t", "p", 0, 100.0, ("a", "b"), (_tick(0, (a, b_refused), cost=10.0),), (), 1e-4)
    )
    assert refuse.quality < serve.quality
    assert refuse.coverage < serve.coverage
    assert refuse.goodput_tok_s < serve.goodput_tok_s
    # ... but the cost term can rise: b earned less per dollar than a.
    assert refuse.cost_per_slo_token_usd < serve.cost_per_slo_token_usd
