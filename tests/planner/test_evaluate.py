"""S5 terms are live: ε, U, spot hazard and τ each change what a candidate is worth."""

from __future__ import annotations

import attrs

from koi.config import KoiConfig
from koi.planner import Planner
from koi.planner._evaluate import Evaluator
from koi.planner._state import PlannerState
from koi.risk import EpsilonCalibrator
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Ladder,
    Market,
    Quant,
    Rank,
)

from ._world import CATALOG, catalog_evaluator, chat_job, pools

JOB = attrs.evolve(  # a tight TPOT bound the candidate meets with little room to spare
    chat_job(rate=6.0),
    target=attrs.evolve(chat_job().target, p99_tpot_ms=29.0),
    precisions=["bf16", "fp8", "int4"],  # the candidate is INT4: the owner lists it
)


def _evaluator(state: PlannerState, cfg: KoiConfig = KoiConfig()) -> Evaluator:  # noqa: B008
    snapshot = ClusterSnapshot(0.0, [JOB], pools(gpus=("L40S",), per_pool=4))
    return catalog_evaluator(snapshot, state, cfg)


def _ladder(market: Market = Market.ON_DEMAND, replicas: int = 1) -> Ladder:
    env = next(
        e
        for e in CATALOG.environments(clouds=["aws"], gpus=["L40S"], markets=[market.value])
        if e.gpus_per_instance == 1 and e.region == "us-east-1"
    )
    return Ladder((Rank(Chain(JOB.model, env, Config(quant=Quant.INT4)), replicas),))


def test_a_wider_radius_raises_the_breach_probability() -> None:
    base = Planner.initial_state(KoiConfig())
    narrow = attrs.evolve(base, epsilon=EpsilonCalibrator(eps=0.0))
    wide = attrs.evolve(base, epsilon=EpsilonCalibrator(eps=2.0))
    ladder = _ladder()
    p = [
        _evaluator(s).evaluate(JOB, ladder, key="c").report.breach_probability
        for s in (narrow, wide)
    ]
    assert p[0] < p[1] < 1.0


def test_spot_preemption_counts_as_risk() -> None:
    state = Planner.initial_state(KoiConfig())
    ev = _evaluator(state)
    on_demand = ev.evaluate(JOB, _ladder(Market.ON_DEMAND), key="od").report
    spot = ev.evaluate(JOB, _ladder(Market.SPOT), key="spot").report
    assert spot.breach_probability > on_demand.breach_probability


def test_a_ladder_near_its_capacity_is_a_risk_even_when_its_p99s_are_within_bounds() -> None:
    # Bounds so loose that the predicted p99s at 94 % of one replica's capacity (TTFT ~15 s,
    # TPOT ~66 ms) are far inside them: only the chance that the replica cannot carry the
    # traffic makes the single replica risky, and C3 takes two.
    job = attrs.evolve(
        JOB,
        workload=attrs.evolve(JOB.workload, rate_rps=14.4),
        target=attrs.evolve(JOB.target, p99_ttft_ms=60_000.0, p99_tpot_ms=500.0),
    )
    ev = _evaluator(Planner.initial_state(KoiConfig()))
    one, two = (ev.evaluate(job, _ladder(replicas=n), key=f"r{n}") for n in (1, 2))
    assert one.prediction is not None
    assert two.prediction is not None
    need = job.required_output_tok_s(0.0)
    capacity = ev.capacity_tok_s(job, one.prediction)
    assert 0.9 * capacity < need < capacity
    assert one.prediction.outcomes.p99_ttft_ms < 0.5 * job.target.p99_ttft_ms
    assert one.report.rejected.startswith("C3")
    assert not two.report.rejected
    assert two.report.breach_probability < 0.5 * one.report.breach_probability


def test_tau_rejects_risky_changes_but_never_a_running_ladder() -> None:
    strict = attrs.evolve(KoiConfig(), planner=attrs.evolve(KoiConfig().planner, tau=0.0))
    state = Planner.initial_state(strict)
    ladder = _ladder()
    report = _evaluator(state, strict).evaluate(JOB, ladder, key="c").report
    assert report.breach_probability > 0.0
    assert report.rejected.startswith("C3")
    snapshot = ClusterSnapshot(
        0.0, [JOB], pools(gpus=("L40S",), per_pool=4), [ActiveDeployment(JOB.id, ladder)]
    )
    keep_eval = catalog_evaluator(snapshot, state, strict)
    keep = keep_eval.evaluate(JOB, ladder, key="keep").report
    assert keep.kind is ActionKind.KEEP
    assert not keep.rejected


def test_a_precision_the_owner_does_not_list_is_c2_infeasible_even_when_running() -> None:
    state = Planner.initial_state(KoiConfig())
    ladder = _ladder()  # INT4
    bf16_only = attrs.evolve(JOB, precisions=["bf16"])
    placed = _evaluator(state).evaluate(bf16_only, ladder, key="c")
    assert placed.candidate is None
    assert placed.report.rejected == (
        "C2: precision policy: ranks[0]: int4 is outside the accepted precisions (bf16) of job chat"
    )
    assert _evaluator(state).evaluate(JOB, ladder, key="c").candidate is not None
    # Unlike risk (C3), the policy rejects the running ladder too: it is the owner's call.
    snapshot = ClusterSnapshot(
        0.0, [bf16_only], pools(gpus=("L40S",), per_pool=4), [ActiveDeployment(JOB.id, ladder)]
    )
    keep_eval = catalog_evaluator(snapshot, state, KoiConfig())
    keep = keep_eval.evaluate(bf16_only, ladder, key="keep").report
    assert keep.kind is ActionKind.KEEP
    assert keep.rejected.startswith("C2: precision policy")


def test_the_planner_moves_a_job_off_a_precision_its_owner_withdrew() -> None:
    ladder = _ladder()  # INT4 on one L40S
    bf16_only = attrs.evolve(chat_job(rate=2.0), precisions=["bf16"])
    snapshot = ClusterSnapshot(
        0.0,
        [bf16_only],
        pools(gpus=("L40S", "H100-SXM"), per_pool=4),
        [ActiveDeployment(bf16_only.id, ladder)],
    )
    result = Planner().tick(snapshot)
    action = result.plan.action(bf16_only.id)
    assert action.kind is ActionKind.RECONFIGURE
    assert {r.chain.config.quant for r in action.ladder.ranks} == {Quant.BF16}
    keep = next(c for c in result.candidates_for(bf16_only.id) if c.key == "keep")
    assert keep.rejected.startswith("C2: precision policy: ranks[0]: int4")
    chosen = [c for c in result.candidates if c.chosen]
    assert all(bf16_only.precision_problem(c.ladder) is None for c in chosen)
