"""A running job's move to a chain new to it is banded by what borrowed corrections got wrong
on first windows.

A job's first window on a chain measures how far the corrections it borrowed for that chain
(its siblings', its stratum's) carry; once the job has run there, its own corrections predict
it.  Measured on hetero-3h seed 0, the first windows' p99 TPOT residuals reach +2.95 at their
95th percentile, the settled chains' +0.71 (docs/benchmark.md, "Bands for untried chains").
"""

from __future__ import annotations

import attrs

from koi.config import KoiConfig
from koi.dag import default_dag
from koi.planner import Planner
from koi.planner._corrections import DECODE_TIME, correction_key, job_key
from koi.planner._evaluate import Evaluator
from koi.planner._learn import _child_residuals
from koi.planner._strata import FIRST_WINDOWS, GLOBAL, band_stratum, stratum_for
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Ladder,
    Observation,
    Outcome,
    Rank,
)

from ._world import CATALOG, SURROGATE, catalog_evaluator, chat_job, pools, unhurried_planner

JOB = chat_job(rate=6.0)
POOLS = pools(gpus=("L40S", "H100-SXM"), per_pool=4)
TPOT = Outcome.TPOT.value


def _window(ladder: Ladder, start_s: float, tpot_factor: float) -> list[Observation]:
    """What the prior predicts for ``ladder``, with the TPOT ``tpot_factor`` times slower."""
    pred = SURROGATE.screen(JOB, ladder, now_s=start_s)
    out = []
    for rp in pred.ranks:
        requests = int(JOB.workload.rate_rps * rp.traffic_share * 300.0)
        tpot = rp.outcomes.p99_tpot_ms * tpot_factor
        out.append(
            Observation(
                job_id=JOB.id,
                chain=rp.rank.chain,
                start_s=start_s,
                end_s=start_s + 300.0,
                requests=requests,
                completed=requests,
                replicas_up=rp.rank.replicas,
                outcomes=attrs.evolve(rp.outcomes, p99_tpot_ms=tpot),
                mediators=rp.mediators,
            )
        )
    return out


def test_a_first_window_is_pooled_with_the_other_first_windows_and_a_later_one_is_not() -> None:
    planner = unhurried_planner()
    ladder = planner.tick(ClusterSnapshot(0.0, [JOB], POOLS, [])).plan.action(JOB.id).ladder
    assert not ladder.is_empty
    stratum = stratum_for(ladder.ranks[0].chain, CATALOG.models[JOB.model], planner.config)
    running = [ActiveDeployment(JOB.id, ladder, 0.0)]
    for k in (1, 2):
        obs = _window(ladder, 300.0 * k, 1.5)
        result = planner.tick(ClusterSnapshot(300.0 * (k + 1), [JOB], POOLS, running), obs)
        assert not result.fallback, result.errors
        residuals = planner.state.residuals
        assert len(residuals.get(stratum, TPOT)) == k  # every window is its stratum's
        assert len(residuals.get(FIRST_WINDOWS, TPOT)) == 1  # only the first is a first


def _ladder(gpu: str = "L40S") -> Ladder:
    env = next(
        p.environment
        for p in POOLS
        if p.environment.gpu == gpu and p.environment.gpus_per_instance == 1
    )
    return Ladder((Rank(Chain(JOB.model, env, Config()), 1),))


def _evaluator(cfg: KoiConfig, *, tried: bool, running: bool = True) -> Evaluator:
    """An evaluator whose first windows missed p99 TPOT by +150 % and whose stratum's
    settled windows by nothing.  The job runs on one H100 when ``running``, and has run on
    the L40S chain when ``tried``."""
    chain = _ladder().ranks[0].chain
    stratum = stratum_for(chain, CATALOG.models[JOB.model], cfg)
    state = Planner.initial_state(cfg)
    residuals = state.residuals.add_residuals(
        [(FIRST_WINDOWS, TPOT, 1.5)] * 30 + [(stratum, TPOT, 0.0)] * 30
    )
    corrections = state.corrections
    if tried:
        own = job_key(correction_key(chain, stratum.key), JOB.id)
        corrections = corrections.record([(own, DECODE_TIME, 1.0, 1.0, 1.0)], cfg.corrections)
    active = [ActiveDeployment(JOB.id, _ladder("H100-SXM"), 0.0)] if running else []
    snapshot = ClusterSnapshot(600.0, [JOB], POOLS, active)
    state = attrs.evolve(state, residuals=residuals, corrections=corrections)
    return catalog_evaluator(snapshot, state, cfg)


def test_a_move_to_an_untried_chain_takes_the_first_windows_band_and_c3_rejects_it() -> None:
    cfg = KoiConfig()
    ladder = _ladder()
    untried = _evaluator(cfg, tried=False).evaluate(JOB, ladder, key="c").report
    tried = _evaluator(cfg, tried=True).evaluate(JOB, ladder, key="c").report
    assert untried.breach_probability > cfg.planner.tau >= tried.breach_probability
    assert untried.rejected.startswith("C3")
    assert not tried.rejected


def test_a_pending_job_is_banded_by_its_stratum() -> None:
    """Every chain is new to a job that has not started: there is no keep to protect."""
    cfg = KoiConfig()
    ladder = _ladder()
    pending = _evaluator(cfg, tried=False, running=False).evaluate(JOB, ladder, key="c").report
    tried = _evaluator(cfg, tried=True).evaluate(JOB, ladder, key="c").report
    assert pending.breach_probability == tried.breach_probability
    assert not pending.rejected


def test_without_the_causal_graph_first_windows_are_not_kept_apart() -> None:
    nograph = KoiConfig()
    nograph = attrs.evolve(nograph, planner=attrs.evolve(nograph.planner, causal_graph=False))
    assert band_stratum(GLOBAL, untried=True, cfg=nograph) == GLOBAL
    assert band_stratum(GLOBAL, untried=True, cfg=KoiConfig()) == FIRST_WINDOWS
    assert band_stratum(GLOBAL, untried=False, cfg=KoiConfig()) == GLOBAL


def test_the_pooled_first_windows_are_no_environment_of_the_invariance_test() -> None:
    """Each first window is in its stratum's history too: pooled, it would count twice, as an
    environment spanning every stratum."""
    stratum = stratum_for(_ladder().ranks[0].chain, CATALOG.models[JOB.model], KoiConfig())
    edge = next(e for e in default_dag().edges if e[1].endswith(TPOT))
    residuals = Planner.initial_state(KoiConfig()).residuals.add_residuals(
        [(FIRST_WINDOWS, TPOT, 1.5), (stratum, TPOT, 1.5)]
    )
    assert list(_child_residuals(residuals, edge)) == [stratum.key]
