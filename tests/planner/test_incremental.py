"""The planner's cross-tick memos (screens, sizings, predictions, cost references, exercised
edges) only save work: a planner that carried them through a changing fleet plans every tick
exactly as a fresh planner given the same state plans it from scratch."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import attrs

from koi.config import KoiConfig
from koi.planner import Planner
from koi.planner._corrections import (
    DECODE_TIME,
    CorrectionStore,
    SharedCorrections,
    correction_fn,
    correction_key,
)
from koi.planner._evaluate import Evaluated, EvaluationMemo
from koi.planner._strata import stratum_for
from koi.risk import EpsilonCalibrator
from koi.sim import load_scenario, run
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Ladder,
    Observation,
    Outcome,
    Plan,
    Quant,
    Rank,
)

from ._world import CATALOG, catalog_evaluator, chat_job, pools


class _Twin:
    """Runs the warm planner, and before each of its ticks a cold copy of its state."""

    name = "koi"

    def __init__(self) -> None:
        self.warm = Planner()
        self.pairs: list[tuple[Plan, Plan]] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        cold = Planner()
        cold.state = self.warm.state
        # The observed rates outlive a tick (a job may miss a window's telemetry), and so does
        # what each running job was last reviewed on (which jobs a tick only re-checks).
        cold._observed_rates = copy.deepcopy(self.warm._observed_rates)
        cold._output_lengths = copy.deepcopy(self.warm._output_lengths)
        cold._reviews = dict(self.warm._reviews)
        from_scratch = cold.tick(snapshot, observations).plan
        incremental = self.warm.tick(snapshot, observations).plan
        self.pairs.append((incremental, from_scratch))
        return incremental


def test_incremental_ticks_plan_as_from_scratch_on_a_changing_fleet() -> None:
    # smoke: jobs arrive and finish, a pool shrinks, spot preemptions, a traffic surge.
    sc = load_scenario("smoke")
    assert len({e.kind for e in sc.events}) >= 2
    twin = _Twin()
    run(sc, twin, seed=1)
    assert len(twin.pairs) == sc.ticks
    changed = 0
    for k, (incremental, from_scratch) in enumerate(twin.pairs):
        assert incremental == from_scratch, f"tick {k}"
        changed += any(a.kind is not ActionKind.KEEP for a in incremental.actions)
    # The comparison means something: the fleet changed under the planner more than once,
    # and the warm planner answered from its cross-tick memos.
    assert changed >= 2
    assert twin.warm.surrogate.hits > 0


class _Replanner(_Twin):
    """The twin, plus, after each tick, the same snapshot planned again with no new
    telemetry (a tick in which nothing changed) by the warm planner and by a fresh one."""

    def __init__(self) -> None:
        super().__init__()
        self.replans: list[tuple[Plan, Plan]] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        plan = super().decide(snapshot, observations)
        cold = Planner()
        cold.state = self.warm.state
        cold._observed_rates = copy.deepcopy(self.warm._observed_rates)
        cold._output_lengths = copy.deepcopy(self.warm._output_lengths)
        cold._reviews = dict(self.warm._reviews)  # what each job was last reviewed on
        cold._progress = dict(self.warm._progress)
        from_scratch = cold.tick(snapshot, ()).plan
        self.replans.append((self.warm.tick(snapshot, ()).plan, from_scratch))
        return plan


def test_a_tick_with_nothing_new_reuses_evaluations_and_plans_as_from_scratch() -> None:
    twin = _Replanner()
    run(load_scenario("smoke"), twin, seed=1)
    for k, (incremental, from_scratch) in enumerate(twin.pairs):
        assert incremental == from_scratch, f"tick {k}"
    for k, (incremental, from_scratch) in enumerate(twin.replans):
        assert incremental == from_scratch, f"re-plan after tick {k}"
    # The re-plans were answered from the evaluation memo.
    assert twin.warm._evaluations.hits > 0


# ---- the evaluation memo, one input at a time ------------------------------------------------

_CFG = KoiConfig()
_POOLS = pools(gpus=("L40S", "H100-SXM"), per_pool=8)
_A = chat_job("a", rate=4.0)
_B = chat_job("b", rate=2.0)


def _ladder(gpu: str, replicas: int, quant: Quant = Quant.BF16) -> Ladder:
    env = next(p.environment for p in _POOLS if p.environment.gpu == gpu)
    return Ladder((Rank(Chain(_A.model, env, Config(quant=quant)), replicas),))


_LADDERS = (_ladder("L40S", 1), _ladder("L40S", 2, Quant.INT4), _ladder("H100-SXM", 1))


def test_an_evaluation_is_reused_only_while_every_input_of_it_is_unchanged() -> None:
    base = Planner.initial_state(_CFG)
    chain = _LADDERS[0].ranks[0].chain
    skey = stratum_for(chain, CATALOG.models[chain.model], _CFG).key
    slower = CorrectionStore().record(
        [(correction_key(chain, skey), DECODE_TIME, 1.0, 1.4, 1.0)], _CFG.corrections
    )
    b_on = [ActiveDeployment(_B.id, _ladder("H100-SXM", 1))]
    b_moved = [ActiveDeployment(_B.id, _ladder("L40S", 1))]
    a_on = [ActiveDeployment(_A.id, _LADDERS[0])]
    a_grown = [ActiveDeployment(_A.id, _ladder("L40S", 2))]  # the same chain, one more replica
    later = attrs.evolve(base, corrections=slower, epsilon=EpsilonCalibrator(eps=1.5))
    # (what changed, snapshot, state, its cost scale, whether its evaluations must be reused)
    steps = [
        ("start", ClusterSnapshot(0.0, [_A, _B], _POOLS, b_on), base, 0.2, False),
        ("a neighbour moved", ClusterSnapshot(0.0, [_A, _B], _POOLS, b_moved), base, 0.2, True),
        (
            "its chain's correction moved",
            ClusterSnapshot(0.0, [_A, _B], _POOLS, b_moved),
            attrs.evolve(base, corrections=slower),
            0.2,
            False,
        ),
        (
            "the band's radius moved",
            ClusterSnapshot(0.0, [_A, _B], _POOLS, b_moved),
            later,
            0.2,
            False,
        ),
        (
            "it now runs",
            ClusterSnapshot(0.0, [_A, _B], _POOLS, [*b_moved, *a_on]),
            later,
            0.2,
            False,
        ),
        (
            "it runs one more replica",
            ClusterSnapshot(0.0, [_A, _B], _POOLS, [*b_moved, *a_grown]),
            later,
            0.2,
            False,
        ),
        (
            "its cost scale moved",
            ClusterSnapshot(0.0, [_A, _B], _POOLS, [*b_moved, *a_grown]),
            later,
            0.4,
            False,
        ),
        (
            "its ideal point moved",
            ClusterSnapshot(0.0, [_A, _B], _POOLS, [*b_moved, *a_grown]),
            attrs.evolve(later, z_star={_A.id: {Outcome.COST: 0.05}}),
            0.4,
            False,
        ),
    ]
    memo, shared = EvaluationMemo(), SharedCorrections()
    before: list[Evaluated] = []
    for what, snapshot, state, cost_scale, reused in steps:
        scales = {_A.id: cost_scale}
        warm = catalog_evaluator(
            snapshot, state, _CFG, cost_scales=scales, memo=memo, shared=shared
        )
        cold = catalog_evaluator(snapshot, state, _CFG, cost_scales=scales)
        hits = memo.hits
        got = [warm.evaluate(_A, lad, key=f"c{k}") for k, lad in enumerate(_LADDERS)]
        fresh = [cold.evaluate(_A, lad, key=f"c{k}") for k, lad in enumerate(_LADDERS)]
        assert got == fresh, what
        # The exploration items each evaluation records, in the same order.
        assert list(warm.uncertainty.items()) == list(cold.uncertainty.items()), what
        assert warm.mechanism_items == cold.mechanism_items, what
        assert memo.hits - hits == (len(_LADDERS) if reused else 0), what
        if before and not reused:  # the change matters: a reused entry would be stale
            assert got != before, what
        before = got
        # One correction per chain, shared by every job, equal to the job's own.
        for lad in _LADDERS:
            for job in (_A, _B):
                own = correction_fn(state, job, gpus=CATALOG.gpus, models=CATALOG.models, cfg=_CFG)
                c = lad.ranks[0].chain
                assert warm.corrections(job)(c) == cold.corrections(job)(c), what
                assert warm._full_corrections(job)(c) == own(c), what
