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
from koi.planner._corrections import DECODE_TIME, PREFILL_TIME
from koi.planner._regime import Regime, compared_on, window_regime
from koi.planner._strata import stratum_for
from koi.surrogate import Surrogate
from koi.types import (
    ActionKind,
    ActiveDeployment,
    ClusterSnapshot,
    Job,
    Ladder,
    LengthDist,
    Observation,
    Outcome,
    Pool,
    ServingTarget,
    WorkloadProfile,
)

from ._world import CATALOG

ENV = next(e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith("on_demand/p5.48xlarge"))
MODEL = "Llama-3.1-8B"
JOB = Job(
    "chat",
    MODEL,
    "online",
    WorkloadProfile(LengthDist(1024, 0.3, 4096), LengthDist(200, 0.3, 1024), rate_rps=20.0),
    ServingTarget.online(p99_ttft_ms=300.0, p99_tpot_ms=60.0),
)
POOLS = [Pool(ENV, 4)]


def _planner() -> Planner:
    cfg = KoiConfig()
    planner = attrs.evolve(cfg.planner, tick_deadline_s=None, proposer_timeout_s=None)
    return Planner(config=attrs.evolve(cfg, planner=planner))


def _observations(
    ladder: Ladder, *, start_s: float, served: float, completed: float, ttft_ms: float
) -> list[Observation]:
    """One window per rank of ``ladder``: ``served`` × the prior's capacity in throughput,
    ``completed`` × its arrivals finished, p99 TTFT ``ttft_ms``, TPOT as the prior says."""
    pred = Surrogate(CATALOG.gpus, CATALOG.models).screen(JOB, ladder, now_s=start_s)
    out = []
    for rp in pred.ranks:
        requests = int(20.0 * rp.traffic_share * 300.0)
        outcomes = attrs.evolve(
            rp.outcomes, p99_ttft_ms=ttft_ms, throughput_tok_s=served * rp.capacity_tok_s
        )
        out.append(
            Observation(
                job_id=JOB.id,
                chain=rp.rank.chain,
                start_s=start_s,
                end_s=start_s + 300.0,
                requests=requests,
                completed=int(completed * requests),
                replicas_up=rp.rank.replicas,
                outcomes=outcomes,
                mediators=rp.mediators,
            )
        )
    return out


def _after_window(*, completed: float, since_s: float = 0.0) -> tuple[Planner, TickResult, Ladder]:
    """Place the job, let it run from ``since_s``, then report the window [300, 600) in
    which its ranks served at half the prior's capacity with a 60 s p99 TTFT."""
    planner = _planner()
    # Launched (no launcher plugin: the plan is what runs), so the ledger holds its prediction.
    placed = planner.tick(ClusterSnapshot(0.0, [JOB], POOLS, []))
    ladder = placed.plan.action(JOB.id).ladder
    assert not ladder.is_empty
    obs = _observations(ladder, start_s=300.0, served=0.5, completed=completed, ttft_ms=60_000.0)
    running = ClusterSnapshot(600.0, [JOB], POOLS, [ActiveDeployment(JOB.id, ladder, since_s)])
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
    base = _planner().tick(ClusterSnapshot(0.0, [JOB], POOLS, []), launch=False)
    ladder = base.plan.action(JOB.id).ladder
    (steady, *_) = _observations(ladder, start_s=0.0, served=1.0, completed=0.9, ttft_ms=1.0)
    assert window_regime(steady, 0.15) is Regime.STEADY
    assert window_regime(attrs.evolve(steady, completed=0), 0.15) is Regime.OVERLOADED
    more = attrs.evolve(steady, completed=2 * steady.requests)
    assert window_regime(more, 0.15) is Regime.DRAINING
    assert window_regime(attrs.evolve(steady, requests=0, completed=5), 0.15) is Regime.STEADY
    assert compared_on(Regime.OVERLOADED, Outcome.THROUGHPUT.value)
    assert not compared_on(Regime.OVERLOADED, Outcome.TTFT.value)
    assert not compared_on(Regime.DRAINING, "queue_depth")
    assert compared_on(Regime.STEADY, Outcome.TTFT.value)


def test_an_overloaded_window_corrects_the_step_from_its_capacity_not_its_latency() -> None:
    planner, result, ladder = _after_window(completed=0.4)
    assert not result.fallback, result.errors
    key, cc = _stratum(planner, ladder), planner.config.corrections
    store = planner.state.corrections
    # Half the prior's capacity: every step twice as long, prefill and decode alike.
    assert store.factor(key, DECODE_TIME, cc) == pytest.approx(2.0, rel=0.02)
    assert store.factor(key, PREFILL_TIME, cc) == pytest.approx(2.0, rel=0.02)
    # The 60 s backlog teaches no TTFT factor and stays out of the risk band.
    assert store.factor(key, Outcome.TTFT.value, cc) is None
    residuals = planner.state.residuals
    assert not any(v == Outcome.TTFT.value for _, v in residuals.keys())  # noqa: SIM118
    assert any(v == Outcome.THROUGHPUT.value for _, v in residuals.keys())  # noqa: SIM118


def test_the_overloaded_job_is_scaled_up_within_c3() -> None:
    _, result, ladder = _after_window(completed=0.4)
    action = result.plan.action(JOB.id)
    # Sized for the capacity it measured, it gets twice the GPUs; with the backlog learned as
    # a 20x TTFT factor every scale-up breached and the overloaded ladder was kept.
    assert action.kind is ActionKind.RECONFIGURE
    assert action.ladder.gpus >= 2 * ladder.gpus
    chosen = next(c for c in result.candidates_for(JOB.id) if c.chosen)
    assert chosen.breach_probability <= KoiConfig().planner.tau


def test_a_draining_window_teaches_nothing_about_latency_or_capacity() -> None:
    planner, _, ladder = _after_window(completed=2.0)
    key, cc = _stratum(planner, ladder), planner.config.corrections
    store = planner.state.corrections
    for variable in (DECODE_TIME, PREFILL_TIME, Outcome.TTFT.value):
        assert store.factor(key, variable, cc) is None


def test_the_window_after_a_launch_gives_no_capacity_sample() -> None:
    # Committed at the window's start: part of the window its replicas were still starting.
    planner, _, ladder = _after_window(completed=0.4, since_s=300.0)
    key, cc = _stratum(planner, ladder), planner.config.corrections
    assert planner.state.corrections.factor(key, DECODE_TIME, cc) is None
    assert planner.state.corrections.factor(key, Outcome.TTFT.value, cc) is None
