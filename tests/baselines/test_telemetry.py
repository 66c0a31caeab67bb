"""Every surrogate-based baseline reads the telemetry: its plan moves with what it observes.

Each test runs one planner twice from the same state on the same snapshot, changing one thing in
the window's observations — the request rate, or the latency — and checks that the plan for the
observed job changes.  The queue policies (``fcfs``, ``edf``, ``best-fixed``) never revisit a
placed job, so telemetry has nothing to change for them; they are not tested here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest

from koi.baselines import (
    BaselineConfig,
    Evolutionary,
    FeedbackMilp,
    PerJob,
    RollingMilp,
    Thompson,
    Toolkit,
    correction_key,
    make_policy,
)
from koi.candidates import ObservedRates, OutputLengths, observed_rates, with_observed_output
from koi.catalog import load_catalog
from koi.sim import build_world
from koi.surrogate import Surrogate
from koi.types import ActionKind, ActiveDeployment, Chain, ClusterSnapshot, Ladder, Observation

_CAT = load_catalog()
_JOB = "chat-8b"
_WINDOW = 300.0


_SURROGATE = Surrogate(dict(_CAT.gpus), dict(_CAT.models))


def _policy(planner: str) -> Any:
    """A fresh ``planner`` as ``make_policy`` builds it, over one shared (cached) surrogate."""
    tk = Toolkit(dict(_CAT.gpus), dict(_CAT.models), _SURROGATE)
    rng = np.random.default_rng([0, len(planner)])
    cfg = BaselineConfig(evo_generations=5)
    build: dict[str, Callable[[], Any]] = {
        "per-job": lambda: PerJob(tk),
        "rolling-milp": lambda: RollingMilp(tk),
        "feedback-milp": lambda: FeedbackMilp(tk),
        "evolutionary": lambda: Evolutionary(tk, rng, cfg),
        "thompson": lambda: Thompson(tk, rng, cfg),
    }
    return build[planner]()


def _running(planner: str) -> tuple[ClusterSnapshot, Ladder]:
    """smoke's online job alone on smoke's L4 pool, running on the ladder ``planner`` first
    gives it (without its shared system prompt: a cached prefix lets one replica absorb the
    tripled traffic these tests need to outgrow it).  One GPU type, so that answering more
    traffic means more replicas: on the whole smoke fleet the cheapest answer to tripled traffic
    on L4s is a single larger GPU, and the replica count can fall while the capacity rises."""
    snap = build_world("smoke", seed=0).snapshot()
    job = snap.job(_JOB)
    job = attrs.evolve(job, workload=attrs.evolve(job.workload, prefix_tokens=None))
    l4 = [p for p in snap.pools if p.environment.gpu == "L4"]
    alone = ClusterSnapshot(snap.time_s, [job], l4)
    first = _policy(planner).decide(alone, ()).action(_JOB)
    assert first.kind is ActionKind.PLACE
    later = ClusterSnapshot(
        snap.time_s + _WINDOW, [job], l4, [ActiveDeployment(_JOB, first.ladder)]
    )
    return later, first.ladder


def _window(
    snap: ClusterSnapshot,
    ladder: Ladder,
    *,
    rate_x: float = 1.0,
    latency_x: float = 1.0,
    output_x: float = 1.0,
) -> list[Observation]:
    """What the surrogate predicts the ladder reports at ``rate_x`` times the declared rate,
    with both p99s ``latency_x`` times the prediction and ``output_x`` times the tokens."""
    job = snap.job(_JOB)
    pred = _SURROGATE.predict(job, ladder)
    rate = (job.workload.rate_rps or 0.0) * rate_x
    out = []
    for rp in pred.ranks:
        o = rp.outcomes
        outcomes = attrs.evolve(
            o,
            p99_ttft_ms=o.p99_ttft_ms * latency_x,
            p99_tpot_ms=o.p99_tpot_ms * latency_x,
            throughput_tok_s=o.throughput_tok_s * output_x,
        )
        out.append(
            Observation(
                job_id=_JOB,
                chain=rp.rank.chain,
                start_s=snap.time_s - _WINDOW,
                end_s=snap.time_s,
                requests=round(rate * rp.traffic_share * _WINDOW),
                completed=round(rate * rp.traffic_share * _WINDOW),
                replicas_up=rp.rank.replicas,
                outcomes=outcomes,
                mediators=rp.mediators,
            )
        )
    return out


def _plans(planner: str, *, windows: int = 1, **change: float) -> tuple[Any, Any, Ladder]:
    """The job's action after ``windows`` windows as predicted, and after as many changed ones
    (two fresh planners with the same history)."""
    snap, ladder = _running(planner)
    plain = _window(snap, ladder)
    changed = _window(snap, ladder, **change)
    actions = []
    for obs in (plain, changed):
        policy = _policy(planner)
        policy.decide(ClusterSnapshot(snap.time_s - _WINDOW, snap.jobs, snap.pools), ())
        for _ in range(windows):
            action = policy.decide(snap, obs).action(_JOB)
        actions.append(action)
    return actions[0], actions[1], ladder


@pytest.mark.parametrize(
    "planner", ["per-job", "rolling-milp", "feedback-milp", "evolutionary", "thompson"]
)
def test_plan_follows_the_observed_request_rate(planner: str) -> None:
    plain, drifted, ladder = _plans(planner, rate_x=3.0)
    assert drifted.ladder != plain.ladder
    # Three times the traffic needs more replicas than the declaration did.
    assert drifted.ladder.replicas > ladder.replicas


@pytest.mark.parametrize("planner", ["rolling-milp", "feedback-milp"])
def test_plan_follows_the_observed_output_length(planner: str) -> None:
    plain, longer, ladder = _plans(planner, windows=3, output_x=3.0)
    assert longer.ladder != plain.ladder
    assert longer.ladder.replicas > ladder.replicas


@pytest.mark.parametrize(("planner", "windows"), [("feedback-milp", 1), ("thompson", 6)])
def test_plan_follows_the_observed_latency(planner: str, windows: int) -> None:
    plain, slow, _ = _plans(planner, windows=windows, latency_x=3.0)
    assert slow.ladder != plain.ladder


def test_observed_rates_and_drift_rule() -> None:
    snap, ladder = _running("rolling-milp")
    job = snap.job(_JOB)
    rates = observed_rates(_window(snap, ladder, rate_x=2.0))
    assert rates[_JOB] == pytest.approx(2 * (job.workload.rate_rps or 0), rel=0.05)
    tk = Toolkit.build(_CAT.gpus, _CAT.models)
    assert tk.observe(snap, _window(snap, ladder, rate_x=1.1)) is snap  # within tolerance
    planned = tk.observe(snap, _window(snap, ladder, rate_x=2.0)).job(_JOB)
    assert (planned.workload.rate_rps or 0) >= 2 * (job.workload.rate_rps or 0)


def test_observed_rates_count_the_backlog_of_jobs_that_receive_traffic() -> None:
    snap, ladder = _running("rolling-milp")
    window = _window(snap, ladder)
    arrived = sum(o.requests for o in window) / _WINDOW
    queued = [
        attrs.evolve(o, mediators=attrs.evolve(o.mediators, queue_depth=30.0)) for o in window
    ]
    backlog = sum(30.0 * o.replicas_up for o in window) / _WINDOW
    assert observed_rates(queued)[_JOB] == pytest.approx(arrived + backlog)
    # A backlog many windows deep is drained at most ``backlog_drain`` times the arrivals.
    deep = [attrs.evolve(o, mediators=attrs.evolve(o.mediators, queue_depth=1e5)) for o in window]
    assert observed_rates(deep)[_JOB] == pytest.approx(2 * arrived)
    assert observed_rates(deep, backlog_drain=0.5)[_JOB] == pytest.approx(1.5 * arrived)
    assert observed_rates(deep, backlog_drain=math.inf)[_JOB] > 100 * arrived
    # A telemetry source without queue depths gives the arrivals alone.
    unknown = [attrs.evolve(o, missing=("queue_depth",)) for o in queued]
    assert observed_rates(unknown)[_JOB] == pytest.approx(arrived)
    # Ranks that received nothing (a batch job's) give no rate, whatever they hold queued.
    idle = [attrs.evolve(o, requests=0, completed=0) for o in queued]
    assert _JOB not in observed_rates(idle)


def test_a_window_that_moves_a_job_to_other_chains_reads_no_lower_than_the_one_before() -> None:
    snap, ladder = _running("rolling-milp")
    (first,) = _window(snap, ladder, rate_x=3.0)
    moved_chain = Chain(
        first.chain.model,
        first.chain.environment,
        attrs.evolve(first.chain.config, max_batch_size=2 * first.chain.config.max_batch_size),
    )
    assert moved_chain != first.chain

    def later(o: Observation, k: int, **change: Any) -> Observation:
        return attrs.evolve(
            o, start_s=o.start_s + k * _WINDOW, end_s=o.end_s + k * _WINDOW, **change
        )

    # The window of the move reports only what the new chain received (the old one is gone).
    moved = later(first, 1, chain=moved_chain, requests=first.requests // 2)
    settled = later(first, 2, chain=moved_chain, requests=first.requests // 4)

    def alone(o: Observation) -> float:
        return observed_rates([o])[_JOB]

    rates = ObservedRates()
    rates.update([first])
    assert rates.get(_JOB) == alone(first)
    rates.update([moved])
    assert alone(moved) < rates.get(_JOB) == alone(first)
    # On the same chains the rate follows the window, down as well as up.
    rates.update([settled])
    assert rates.get(_JOB) == alone(settled)
    # A move after a gap in the job's telemetry is read as it is.
    fresh = ObservedRates()
    fresh.update([first])
    gap = later(first, 2, chain=moved_chain, requests=first.requests // 2)
    fresh.update([gap])
    assert fresh.get(_JOB) == alone(gap)


def test_output_lengths_need_three_windows_and_only_raise_the_declaration() -> None:
    snap, ladder = _running("rolling-milp")
    job = snap.job(_JOB)
    declared = job.workload.output_len.mean
    lengths = OutputLengths()
    for k in range(3):
        assert lengths.mean(_JOB) is None
        lengths.update(_window(snap, ladder, output_x=2.0))
        assert k < 2 or lengths.mean(_JOB) is not None
    seen = lengths.mean(_JOB)
    assert seen is not None
    longer = with_observed_output(job, seen, tolerance=0.15)
    assert 2.0 * declared * 0.95 < longer.workload.output_len.mean <= 2.0 * declared * 1.1
    assert longer.workload.output_len.max == job.workload.output_len.max
    assert with_observed_output(job, 1.1 * declared, tolerance=0.15) is job
    assert with_observed_output(job, 0.5 * declared, tolerance=0.15) is job  # never shorter


def test_feedback_milp_learns_a_smoothed_factor_per_stratum() -> None:
    snap, ladder = _running("feedback-milp")
    policy = _policy("feedback-milp")
    slow = _window(snap, ladder, latency_x=2.0)
    policy.learn(snap, slow)
    key = correction_key(ladder.ranks[0].chain)
    after_one = policy.factors[key, "decode_time"]
    assert after_one == pytest.approx(1 + policy.alpha * (2.0 - 1.0), rel=0.02)
    for _ in range(20):
        policy.learn(snap, slow)
    # The factor in force is part of the prediction: it converges to where the corrected
    # prediction matches what was observed, and stays there.
    job = snap.job(_JOB)
    seen = slow[0].outcomes.p99_tpot_ms
    corrected = _SURROGATE.predict(job, ladder, corrections=policy.correction)
    assert corrected.ranks[0].outcomes.p99_tpot_ms == pytest.approx(seen, rel=0.05)
    assert policy.factors[key, "decode_time"] > after_one
    # TTFT is corrected on top of what the slower decode already adds to it (the surrogate's
    # queueing more than doubles it), so its own factor comes down.
    assert policy.factors[key, "p99_ttft_ms"] < 1.0
    assert policy.resized(ladder).replicas >= 2 * ladder.replicas - len(ladder.ranks)


def test_the_registry_builds_feedback_milp() -> None:
    assert isinstance(make_policy("feedback-milp", catalog=_CAT), FeedbackMilp)
