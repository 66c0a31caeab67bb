"""A window out of steady state teaches capacity, not latency (koi.planner._regime).

An overloaded rank's p99 TTFT measures how long its backlog has been growing; learned as a
TTFT or step-time factor it made every candidate of the stratum look hopeless, C3 rejected the
scale-ups that would have cleared the backlog, and the backlog grew (homo-12h,
docs/benchmark.md).  These tests pin the rule: such a window corrects the step from its
throughput and nothing from its latencies, and the job is then scaled up within C3.
"""

from __future__ import annotations

import attrs
import pytest

from koi.config import KoiConfig
from koi.planner import Planner, TickResult
from koi.planner._corrections import (
    DECODE_TIME,
    PREFILL_TIME,
    capacity_samples,
    correction_fn,
    correction_key,
)
from koi.planner._regime import Regime, compared_on, window_regime
from koi.planner._strata import stratum_for
from koi.surrogate import RankCorrection, Surrogate
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    LengthDist,
    Observation,
    Outcome,
    Pool,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

from ._world import CATALOG, unhurried_planner

ENV = next(
    e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith("on_demand/p5.48xlarge")
)
MODEL = "Llama-3.1-8B"
RATE = 60.0
JOB = Job(
    "chat",
    MODEL,
    "online",
    WorkloadProfile(LengthDist(1024, 0.3, 4096), LengthDist(200, 0.3, 1024), rate_rps=RATE),
    ServingTarget.online(p99_ttft_ms=300.0, p99_tpot_ms=60.0),
)
POOLS = [Pool(ENV, 4)]


def _observations(
    ladder: Ladder,
    *,
    start_s: float,
    served: float,
    ttft_ms: float,
    completed: float | None = None,
    job: Job = JOB,
) -> list[Observation]:
    """One window per rank of ``ladder``: throughput ``served`` × the prior's capacity (at
    most the offered tokens), the share of arrivals that throughput finishes (or
    ``completed``), p99 TTFT ``ttft_ms``, TPOT as the prior says."""
    pred = Surrogate(CATALOG.gpus, CATALOG.models).screen(job, ladder, now_s=start_s)
    out = []
    for rp in pred.ranks:
        rate = job.workload.rate_rps
        requests = int(rate * rp.traffic_share * 300.0)
        offered = rate * rp.traffic_share * job.workload.output_len.mean
        throughput = min(served * rp.capacity_tok_s, offered)
        done = throughput / offered if completed is None else completed
        outcomes = attrs.evolve(rp.outcomes, p99_ttft_ms=ttft_ms, throughput_tok_s=throughput)
        out.append(
            Observation(
                job_id=job.id,
                chain=rp.rank.chain,
                start_s=start_s,
                end_s=start_s + 300.0,
                requests=requests,
                completed=int(done * requests),
                replicas_up=rp.rank.replicas,
                outcomes=outcomes,
                mediators=rp.mediators,
            )
        )
    return out


def _after_window(
    *,
    completed: float | None = None,
    since_s: float = 0.0,
    cfg: KoiConfig | None = None,
    job: Job = JOB,
    served: float = 0.4,
) -> tuple[Planner, TickResult, Ladder]:
    """Place the job, let it run from ``since_s``, then report the window [300, 600) in
    which its ranks served ``served`` (40 %) of the prior's capacity with a 60 s p99 TTFT."""
    planner = unhurried_planner(cfg)
    # Launched (no launcher plugin: the plan is what runs), so the ledger holds its prediction.
    placed = planner.tick(ClusterSnapshot(0.0, [job], POOLS, []))
    ladder = placed.plan.action(job.id).ladder
    assert not ladder.is_empty
    obs = _observations(
        ladder, start_s=300.0, served=served, completed=completed, ttft_ms=60_000.0, job=job
    )
    running = ClusterSnapshot(600.0, [job], POOLS, [ActiveDeployment(job.id, ladder, since_s)])
    if since_s >= 300.0:  # the ladder was (re)committed at the window's start
        planner.state = attrs.evolve(
            planner.state,
            ledger={k: attrs.evolve(v, committed_s=300.0) for k, v in planner.state.ledger.items()},
        )
    return planner, planner.tick(running, obs, launch=False), ladder


def _stratum(planner: Planner, ladder: Ladder) -> str:
    chain = ladder.ranks[0].chain
    return stratum_for(chain, CATALOG.models[MODEL], planner.config).key


def test_the_regime_of_a_window() -> None:
    base = unhurried_planner().tick(ClusterSnapshot(0.0, [JOB], POOLS, []), launch=False)
    ladder = base.plan.action(JOB.id).ladder
    (steady, *_) = _observations(ladder, start_s=0.0, served=1.0, completed=0.9, ttft_ms=1.0)
    assert window_regime(steady, 0.15) is Regime.STEADY
    assert window_regime(attrs.evolve(steady, completed=0), 0.15) is Regime.OVERLOADED
    more = attrs.evolve(steady, completed=2 * steady.requests)
    assert window_regime(more, 0.15) is Regime.BACKLOGGED
    # Completions kept pace, but the queue held a fifth of the window's arrivals.
    waiting = 0.2 * steady.requests / steady.replicas_up
    queued = attrs.evolve(steady, mediators=attrs.evolve(steady.mediators, queue_depth=waiting))
    assert window_regime(queued, 0.15) is Regime.BACKLOGGED
    unmeasured = attrs.evolve(queued, missing=("queue_depth",))
    assert window_regime(unmeasured, 0.15) is Regime.STEADY
    assert window_regime(attrs.evolve(steady, requests=0, completed=5), 0.15) is Regime.STEADY
    assert compared_on(Regime.OVERLOADED, Outcome.THROUGHPUT.value)
    assert not compared_on(Regime.OVERLOADED, Outcome.TTFT.value)
    assert not compared_on(Regime.BACKLOGGED, "queue_depth")
    assert compared_on(Regime.STEADY, Outcome.TTFT.value)


def test_an_overloaded_window_corrects_the_step_from_its_capacity_not_its_latency() -> None:
    planner, result, ladder = _after_window()
    assert not result.fallback, result.errors
    key, cc = _stratum(planner, ladder), planner.config.corrections
    store = planner.state.corrections
    # 40 % of the prior's capacity: a decode step 2.5 times as long.
    assert store.factor(key, DECODE_TIME, cc) == pytest.approx(2.5, rel=0.02)
    # The 60 s backlog teaches no TTFT factor and stays out of the risk band.
    assert store.factor(key, Outcome.TTFT.value, cc) is None
    residuals = planner.state.residuals
    assert not any(v == Outcome.TTFT.value for _, v in residuals.keys())  # noqa: SIM118
    assert any(v == Outcome.THROUGHPUT.value for _, v in residuals.keys())  # noqa: SIM118


def test_one_overloaded_window_moves_the_step_by_at_most_the_overload_step() -> None:
    # A rank that served a tenth of its predicted capacity: backlogged prompts crowd the batch
    # (hetero-3h's rag-qwen32b served 317 of a predicted 11,601 tok/s after its launch and read
    # as a 20x slower decode step, where the truth's is 1.5x), so one window moves the factor
    # by at most ``overload_step``; the next overloaded window moves it again.
    planner, _, ladder = _after_window(served=0.1)
    key, cc = _stratum(planner, ladder), planner.config.corrections
    assert cc.overload_step == 3.0
    assert planner.state.corrections.factor(key, DECODE_TIME, cc) == pytest.approx(3.0, rel=0.02)
    cfg = KoiConfig()
    unbounded = attrs.evolve(cfg, corrections=attrs.evolve(cfg.corrections, overload_step=100.0))
    planner, _, ladder = _after_window(served=0.1, cfg=unbounded)
    factor = planner.state.corrections.factor(key, DECODE_TIME, cc)
    assert factor == pytest.approx(10.0, rel=0.02)


def test_the_overloaded_job_is_scaled_up_within_c3() -> None:
    _, result, ladder = _after_window()
    action = result.plan.action(JOB.id)
    # Sized for the capacity it measured, it gets twice the GPUs; with the backlog learned as
    # a 20x TTFT factor every scale-up breached and the overloaded ladder was kept.
    assert action.kind is ActionKind.RECONFIGURE
    assert action.ladder.gpus >= 2 * ladder.gpus
    chosen = next(c for c in result.candidates_for(JOB.id) if c.chosen)
    assert chosen.breach_probability <= KoiConfig().planner.tau


def test_a_backlogged_window_teaches_nothing_about_latency_or_capacity() -> None:
    planner, _, ladder = _after_window(completed=2.0)
    key, cc = _stratum(planner, ladder), planner.config.corrections
    store = planner.state.corrections
    for variable in (DECODE_TIME, Outcome.TTFT.value):
        assert store.factor(key, variable, cc) is None


def test_the_window_after_a_launch_gives_no_capacity_sample() -> None:
    # Committed at the window's start: part of the window its replicas were still starting.
    planner, _, ladder = _after_window(since_s=300.0)
    key, cc = _stratum(planner, ladder), planner.config.corrections
    assert planner.state.corrections.factor(key, DECODE_TIME, cc) is None
    assert planner.state.corrections.factor(key, Outcome.TTFT.value, cc) is None


def test_a_divergence_keeps_the_sample_that_explains_it() -> None:
    """The world gets slower again: the throughput detector fires, the correction learned
    before the change is dropped, and this window's capacity sample is what koi plans on —
    not the prior (before, the reset dropped this tick's samples too, and the next tick
    planned on the prior the world had just contradicted twice)."""
    # A detector that fires on one capped miss, so that the second window diverges.
    cfg = KoiConfig()
    planner, first, ladder = _after_window(
        cfg=attrs.evolve(cfg, cusum=attrs.evolve(cfg.cusum, h=1.0))
    )
    assert not first.fallback, first.errors
    key, cc = _stratum(planner, ladder), planner.config.corrections
    assert planner.state.corrections.factor(key, DECODE_TIME, cc) == pytest.approx(2.5, rel=0.02)
    # The same ladder, the next window, at a fifth of the prior's capacity.
    obs = _observations(ladder, start_s=600.0, served=0.2, ttft_ms=90_000.0)
    snapshot = ClusterSnapshot(900.0, [JOB], POOLS, [ActiveDeployment(JOB.id, ladder, 0.0)])
    second = planner.tick(snapshot, obs, launch=False)
    assert not second.fallback, second.errors
    assert any(d.endswith(Outcome.THROUGHPUT.value) for d in second.learning.divergences)
    factor = planner.state.corrections.factor(key, DECODE_TIME, cc)
    assert factor is not None
    assert factor > 2.5 * 1.3  # the slower world, not the prior and not the old 2.5


def test_the_overloaded_job_is_a_repair_outside_the_swap_budget() -> None:
    # One job, telemetry shows it overloaded: the churn budget (its floor, one) plus one repair.
    _, result, _ = _after_window()
    floor = KoiConfig().calibration.swap_floor
    assert result.knobs["swap_budget"] == floor + 1


def test_a_capacity_miss_at_the_predicted_tpot_corrects_the_prefill_step() -> None:
    """Long prompts, a handful of output tokens: capacity is elastic in the prefill step.  The
    rank serves 40 % of its predicted capacity at the TPOT the prior predicts, so the decode
    step is as predicted and the prefill step is slow: koi corrects the prefill step so the
    capacity matches what was served, and keeps predicting the TPOT it observed (learned as a
    2.5x decode step, the miss made every ladder look past its TPOT bound)."""
    workload = WorkloadProfile(
        LengthDist(6000, 0.3, 24000), LengthDist(40, 0.3, 160), rate_rps=RATE
    )
    job = attrs.evolve(JOB, workload=workload)
    planner, result, ladder = _after_window(job=job)
    assert not result.fallback, result.errors
    chain = ladder.ranks[0].chain
    skey = stratum_for(chain, CATALOG.models[MODEL], planner.config).key
    assert _prefill_explains(planner, correction_key(chain, skey), job, chain) > 1.5


def _prefill_explains(planner: Planner, key: str, job: Job, chain: Chain) -> float:
    """The prefill factor learned under ``key``, having checked that the decode step stayed as
    predicted and that the corrected capacity is the 40 % of the prior's that was served."""
    cc, store = planner.config.corrections, planner.state.corrections
    decode = store.factor(key, DECODE_TIME, cc)
    prefill = store.factor(key, PREFILL_TIME, cc)
    assert decode is not None
    assert decode == pytest.approx(1.0, abs=0.05)
    assert prefill is not None
    surrogate = Surrogate(CATALOG.gpus, CATALOG.models)
    prior = surrogate.capacity(job, chain)
    learned = surrogate.capacity(
        job, chain, corrections=lambda _c: RankCorrection(prefill_time=prefill, decode_time=decode)
    )
    assert prior is not None
    assert learned is not None
    assert learned / prior == pytest.approx(0.4, rel=0.15)  # the capacity it served
    return prefill


def test_a_prefill_step_is_bounded_by_the_overload_step_too() -> None:
    """Where capacity barely moves with the prefill step (elasticity 1/4 here), a window that
    served half its predicted capacity at the predicted TPOT implies a 16x prefill step
    (Llama-3.1-70B's overloaded windows on hetero-3h taught 17x, which made its 24K-token
    summaries look hopeless on every GPU type); one window moves it at most ``overload_step``."""
    ladder = unhurried_planner().tick(ClusterSnapshot(0.0, [JOB], POOLS, []), launch=False)
    ladder = ladder.plan.action(JOB.id).ladder
    (o,) = _observations(ladder, start_s=0.0, served=0.5, completed=0.5, ttft_ms=1.0)
    (rp,) = Surrogate(CATALOG.gpus, CATALOG.models).screen(JOB, ladder, now_s=0.0).ranks
    cap = rp.capacity_tok_s

    def capacity_of(c: RankCorrection) -> float:
        return cap * c.prefill_time**-0.25

    def implied(step: float) -> dict[str, float]:
        samples = capacity_samples(
            "s",
            o,
            rp,
            RankCorrection(),
            cap,
            cap / 2,
            capacity_of=capacity_of,
            max_factor=20.0,
            overload_step=step,
        )
        return {v: in_force * obs / pred for _, v, in_force, obs, pred in samples}

    assert implied(100.0) == pytest.approx({DECODE_TIME: 1.0, PREFILL_TIME: 16.0})
    assert implied(3.0) == pytest.approx({DECODE_TIME: 1.0, PREFILL_TIME: 3.0})


def test_a_capacity_miss_no_prefill_step_explains_keeps_the_measured_tpot() -> None:
    """A chat job (capacity barely moves with the prefill step) serves 40 % of its predicted
    capacity at the TPOT the prior predicts: the decode step takes the capacity miss (2.5x, so
    the sizing matches what was served) and a TPOT factor takes back what the slower step
    added to the predicted TPOT — never below what the window measured."""
    planner, result, ladder = _after_window()
    assert not result.fallback, result.errors
    corr = correction_fn(
        planner.state, JOB, gpus=CATALOG.gpus, models=CATALOG.models, cfg=planner.config
    )
    chain = ladder.ranks[0].chain
    assert corr(chain).decode_time == pytest.approx(2.5, rel=0.05)
    surrogate = Surrogate(CATALOG.gpus, CATALOG.models)
    measured = surrogate.screen(JOB, ladder, now_s=300.0).outcomes.p99_tpot_ms  # as observed
    step_only = attrs.evolve(corr(chain), outcomes={})  # what C3 judged before: the step alone
    with_step = surrogate.screen(JOB, ladder, now_s=300.0, corrections=lambda _c: step_only)
    corrected = surrogate.screen(JOB, ladder, now_s=300.0, corrections=corr)
    assert with_step.outcomes.p99_tpot_ms > 2.0 * measured
    assert corrected.outcomes.p99_tpot_ms < 0.5 * with_step.outcomes.p99_tpot_ms
    assert corrected.outcomes.p99_tpot_ms >= measured


def test_a_rank_short_of_its_replicas_still_gives_a_capacity_sample() -> None:
    """Committed with two replicas, one came up: the rank ran unchanged through the window
    at one replica, so its throughput is that replica's capacity (before, a rank whose
    replicas never all came up never gave a capacity sample and stayed overloaded on the
    prior's prediction for the whole run: chat-70b on homo-12h)."""
    planner = unhurried_planner()
    placed = planner.tick(ClusterSnapshot(0.0, [JOB], POOLS, []))
    ladder = placed.plan.action(JOB.id).ladder
    (rank,) = ladder.ranks
    assert rank.replicas >= 2
    up = Ladder((attrs.evolve(rank, replicas=rank.replicas - 1),))
    obs = _observations(up, start_s=300.0, served=0.4, ttft_ms=60_000.0)
    running = ClusterSnapshot(600.0, [JOB], POOLS, [ActiveDeployment(JOB.id, ladder, 0.0)])
    result = planner.tick(running, obs, launch=False)
    assert not result.fallback, result.errors
    key, cc = _stratum(planner, ladder), planner.config.corrections
    assert planner.state.corrections.factor(key, DECODE_TIME, cc) == pytest.approx(2.5, rel=0.05)


def _batch_window(*, queued: float, learn: bool = True) -> tuple[Planner, Ladder, Job]:
    """A prefill-bound batch job (6K-token prompts, 40 output tokens) placed, then a window in
    which it served 40 % of the prior's capacity at the TPOT the prior predicts, with a 60 s
    p99 TTFT (its queued work waiting) and ``queued`` requests waiting per replica;
    ``learn``: with ``corrections.batch_windows``."""
    workload = WorkloadProfile(
        LengthDist(6000, 0.3, 24000), LengthDist(40, 0.3, 160), total_requests=200_000
    )
    job = Job("digest", MODEL, "batch", workload, ServingTarget.batch(deadline_s=36_000.0))
    cfg = KoiConfig()
    cfg = attrs.evolve(cfg, corrections=attrs.evolve(cfg.corrections, batch_windows=learn))
    planner = unhurried_planner(cfg)
    placed = planner.tick(ClusterSnapshot(0.0, [job], POOLS, []))
    ladder = placed.plan.action(job.id).ladder
    assert not ladder.is_empty
    pred = Surrogate(CATALOG.gpus, CATALOG.models).screen(job, ladder, now_s=300.0)
    obs = []
    for rp in pred.ranks:
        served = 0.4 * rp.capacity_tok_s
        done = int(served * 300.0 / workload.output_len.mean)
        outcomes = attrs.evolve(rp.outcomes, p99_ttft_ms=60_000.0, throughput_tok_s=served)
        mediators = attrs.evolve(rp.mediators, queue_depth=queued)
        obs.append(
            Observation(
                job.id,
                rp.rank.chain,
                300.0,
                600.0,
                0,  # batch work is queued, not arriving
                done,
                rp.rank.replicas,
                outcomes,
                mediators,
            )
        )
    running = ClusterSnapshot(600.0, [job], POOLS, [ActiveDeployment(job.id, ladder, 0.0)])
    planner.tick(running, obs, launch=False)
    return planner, ladder, job


def test_a_batch_window_with_work_queued_corrects_the_capacity_not_the_latency() -> None:
    # With corrections.batch_windows: batch work is kept queued, so its rank runs flat out: a
    # window with requests waiting is saturated.  Its throughput corrects the step that
    # explains it (here the prefill step: the TPOT is as predicted) and its TTFT, the queued
    # work's wait, teaches nothing.  With nothing queued (the job's last requests) the window
    # is steady and teaches no capacity.
    (window,) = _observations(
        Ladder((Rank(Chain(MODEL, ENV, Config()), 1),)),
        start_s=0.0,
        served=1.0,
        completed=1.0,
        ttft_ms=1.0,
    )
    queued = attrs.evolve(window, mediators=attrs.evolve(window.mediators, queue_depth=3.0))
    assert window_regime(queued, 0.15, batch=True) is Regime.SATURATED
    assert window_regime(queued, 0.15) is not Regime.SATURATED
    empty = attrs.evolve(window, mediators=attrs.evolve(window.mediators, queue_depth=0.0))
    assert window_regime(empty, 0.15, batch=True) is Regime.STEADY
    assert not compared_on(Regime.SATURATED, Outcome.TTFT.value)

    planner, ladder, job = _batch_window(queued=3.0)
    chain = ladder.ranks[0].chain
    skey = stratum_for(chain, CATALOG.models[MODEL], planner.config).key
    key, cc = correction_key(chain, skey), planner.config.corrections
    store = planner.state.corrections
    assert store.factor(key, Outcome.TTFT.value, cc) is None
    _prefill_explains(planner, key, job, chain)

    planner, ladder, job = _batch_window(queued=0.0)
    store = planner.state.corrections
    assert store.factor(key, PREFILL_TIME, cc) is None
    assert store.factor(key, Outcome.TTFT.value, cc) is not None
    # By default (opt-in) a batch window, without arrivals, is skipped: nothing is learned.
    planner, ladder, job = _batch_window(queued=3.0, learn=False)
    store = planner.state.corrections
    assert store.factor(key, PREFILL_TIME, cc) is None
    assert store.factor(key, DECODE_TIME, cc) is None
