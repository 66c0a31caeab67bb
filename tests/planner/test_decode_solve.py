"""A steady window's decode step factor is solved for, not scaled (koi.planner._corrections).

Predicted TPOT grows faster than the decode step: a slower step holds more sequences in the
batch, which slows the step again.  The proportional update ``in force · observed / predicted``
overshoots and then flips; on hetero-3h a Qwen3-30B-A3B rank measured at 13 ms went from a
factor of 5.7 to 0.97 in one tick and the planner cut the job to an eighth of its replicas
(docs/benchmark.md).  These tests pin the solve.
"""

from __future__ import annotations

import math

import pytest

from koi.planner._corrections import DECODE_TIME, correction_key, solved_decode
from koi.planner._strata import stratum_for
from koi.surrogate import RankCorrection, Surrogate
from koi.types import ActiveDeployment, ClusterSnapshot, Observation

from ._world import CATALOG, unhurried_planner
from .test_regime import JOB, MODEL, POOLS


def _quadratic(c: RankCorrection) -> float:
    return 4.0 * c.decode_time**2


def test_the_solve_finds_the_factor_that_predicts_the_measured_tpot() -> None:
    in_force = RankCorrection(decode_time=5.7)
    predicted = _quadratic(in_force)
    proportional = 5.7 * 13.0 / predicted
    solved = solved_decode(in_force, 13.0, predicted, _quadratic)
    assert solved == pytest.approx(math.sqrt(13.0 / 4.0), rel=0.01)
    assert proportional < 0.6  # what the proportional update would have learned


def test_without_a_predictor_the_update_is_proportional() -> None:
    assert solved_decode(RankCorrection(decode_time=2.0), 30.0, 20.0, None) == pytest.approx(3.0)


def test_a_factor_past_its_bound_stops_at_the_bound() -> None:
    solved = solved_decode(RankCorrection(), 1e6, 4.0, _quadratic, max_factor=20.0)
    assert solved == pytest.approx(20.0)


def test_no_prediction_past_saturation_reads_as_too_slow() -> None:
    def saturating(c: RankCorrection) -> float | None:
        return None if c.decode_time > 3.0 else _quadratic(c)

    solved = solved_decode(RankCorrection(), 25.0, 4.0, saturating)
    assert solved == pytest.approx(2.5, rel=0.01)


def test_a_tick_learns_the_decode_factor_the_window_measured() -> None:
    """The window is what the prior predicts with a decode step twice as slow; the prior's
    TPOT there is over four times its own, so the proportional rule would learn about 4.4."""
    planner = unhurried_planner()
    placed = planner.tick(ClusterSnapshot(0.0, [JOB], POOLS, []))
    ladder = placed.plan.action(JOB.id).ladder
    surrogate = Surrogate(CATALOG.gpus, CATALOG.models)
    slow = RankCorrection(decode_time=2.0)
    truth = surrogate.screen(JOB, ladder, now_s=300.0, corrections=lambda _c: slow)
    prior = surrogate.screen(JOB, ladder, now_s=300.0)
    assert truth.outcomes.p99_tpot_ms > 4.0 * prior.outcomes.p99_tpot_ms
    obs = []
    for rp in truth.ranks:
        requests = int(JOB.workload.rate_rps * rp.traffic_share * 300.0)
        obs.append(
            Observation(
                job_id=JOB.id,
                chain=rp.rank.chain,
                start_s=300.0,
                end_s=600.0,
                requests=requests,
                completed=requests,
                replicas_up=rp.rank.replicas,
                outcomes=rp.outcomes,
                mediators=rp.mediators,
            )
        )
    running = ClusterSnapshot(600.0, [JOB], POOLS, [ActiveDeployment(JOB.id, ladder, 0.0)])
    planner.tick(running, obs, launch=False)
    chain = ladder.ranks[0].chain
    key = correction_key(chain, stratum_for(chain, CATALOG.models[MODEL], planner.config).key)
    cc = planner.config.corrections
    assert planner.state.corrections.factor(key, DECODE_TIME, cc) == pytest.approx(2.0, rel=0.03)
