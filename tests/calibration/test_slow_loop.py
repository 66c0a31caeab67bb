from __future__ import annotations

import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.calibration import (
    CalibrationConfig,
    CalibrationState,
    TickSignals,
    ideal_point_update,
    regret,
    swap_budget,
)
from koi.errors import InvalidInput
from koi.types import Outcome, Outcomes

CFG = CalibrationConfig(every=1)
BETA0, LAMBDA0 = 0.5, 1.0


def run(q: float | None, reconfig: float, ticks: int, cfg: CalibrationConfig = CFG):
    state = CalibrationState.initial(beta=BETA0, lam=LAMBDA0)
    for _ in range(ticks):
        state = state.observe(TickSignals(q1_rate=q, reconfig_rate=reconfig), cfg)
    return state


def test_unreliable_predictions_raise_beta_and_reliable_ones_lower_it() -> None:
    assert run(0.0, 0.0, 10).beta > BETA0
    assert run(1.0, 0.0, 10).beta < BETA0


def test_beta_stays_within_bounds() -> None:
    assert run(0.0, 0.0, 200).beta == CFG.beta_max
    assert run(1.0, 0.0, 200).beta == CFG.beta_min


def test_no_decided_pairs_leaves_beta_alone() -> None:
    assert run(None, 0.0, 5).beta == BETA0


def test_lambda_follows_reconfiguration_rate() -> None:
    assert run(1.0, 0.9, 5).lam > LAMBDA0
    assert run(1.0, 0.0, 5).lam < LAMBDA0


def test_slow_schedule_only_moves_knobs_every_nth_tick() -> None:
    cfg = attrs.evolve(CFG, every=3)
    state = run(0.0, 1.0, 2, cfg)
    assert (state.beta, state.lam) == (BETA0, LAMBDA0)
    assert run(0.0, 1.0, 3, cfg).beta > BETA0


@given(st.lists(st.floats(0, 1), min_size=1, max_size=20))
def test_regret_is_a_mean_shortfall_in_unit_interval(qs: list[float]) -> None:
    s = regret(qs, window=len(qs))
    assert 0.0 <= s <= 1.0
    assert math.isclose(s, sum(1 - q for q in qs) / len(qs))


def test_swap_budget_grows_with_regret() -> None:
    low, high = swap_budget(0.0, 20, CFG), swap_budget(1.0, 20, CFG)
    assert low < high
    assert swap_budget(0.0, 0, CFG) == CFG.swap_floor


def test_each_failing_job_adds_a_repair_to_the_swap_budget() -> None:
    base = swap_budget(0.0, 10, CFG)
    assert swap_budget(0.0, 10, CFG, repairs=5) == base + 5
    assert swap_budget(0.0, 10, CFG, repairs=50) == base + 10  # never more than the active jobs
    with pytest.raises(InvalidInput, match="repairs"):
        swap_budget(0.0, 10, CFG, repairs=-1)


def _outcomes(cost: float, ttft: float, thr: float) -> Outcomes:
    return Outcomes(
        cost_per_mtok_usd=cost,
        p99_ttft_ms=ttft,
        p99_tpot_ms=20.0,
        throughput_tok_s=thr,
        slo_margin=0.1,
    )


def test_ideal_point_tracks_best_achieved_with_margin() -> None:
    z = ideal_point_update(None, _outcomes(2.0, 300.0, 1000.0), CFG)
    z = ideal_point_update(z, _outcomes(1.0, 400.0, 800.0), CFG)
    assert math.isclose(z[Outcome.COST], 1.0 * (1 - CFG.z_margin))
    assert math.isclose(z[Outcome.TTFT], 300.0 * (1 - CFG.z_margin))
    assert math.isclose(z[Outcome.THROUGHPUT], 1000.0 * (1 + CFG.z_margin))


def test_ideal_point_ignores_unbounded_latency() -> None:
    z = ideal_point_update(None, _outcomes(1.0, math.inf, 10.0), CFG)
    assert Outcome.TTFT not in z
