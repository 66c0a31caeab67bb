"""Held inputs (koi.planner._hold): what the plan reads of the learning moves only when the
estimate leaves its band, so the planner's memos are reused in a running fleet.

A chain that borrows a correction (its stratum's, its model's on another GPU type) keeps what
it borrowed while the source's estimate stays within ``corrections.hysteresis``; the risk band's
ε and residual windows, and each job's ideal point, are held likewise.  Each test fails if the
hold it names is removed.
"""

from __future__ import annotations

import attrs
import pytest

from koi.beliefs import Stratum
from koi.config import KoiConfig
from koi.dag import default_dag
from koi.planner import Planner
from koi.planner._corrections import (
    DECODE_TIME,
    CorrectionStore,
    SharedCorrections,
    correction_fn,
    correction_key,
)
from koi.planner._evaluate import EvaluationMemo, Evaluator
from koi.planner._hold import HeldInputs, held_inputs
from koi.planner._state import PlannerState
from koi.planner._strata import stratum_for
from koi.risk import EpsilonCalibrator, ResidualHistory
from koi.surrogate import Surrogate
from koi.types import Chain, ClusterSnapshot, Config, Ladder, Outcome, Quant, Rank

from ._world import CATALOG, chat_job, pools

_CFG = KoiConfig()
_SURROGATE = Surrogate(CATALOG.gpus, CATALOG.models)
_POOLS = pools(gpus=("L40S", "H100-SXM"), per_pool=8)
_JOB = chat_job("a", rate=4.0)
_L40S = next(p.environment for p in _POOLS if p.environment.gpu == "L40S")
_H100 = next(p.environment for p in _POOLS if p.environment.gpu == "H100-SXM")
# The chain planned: no evidence of its own (tp 2), its stratum's from a tp-1 sibling.
_CHAIN = Chain(_JOB.model, _L40S, Config(tp=2, quant=Quant.BF16))
_SIBLING = Chain(_JOB.model, _L40S, Config(tp=1, quant=Quant.BF16))
# ... or, in another test, its model's on another GPU type (no evidence in its stratum).
_ELSEWHERE = Chain(_JOB.model, _H100, Config(tp=1, quant=Quant.BF16))
_LADDER = Ladder((Rank(_CHAIN, 2),))


def _key(chain: Chain) -> str:
    return correction_key(chain, stratum_for(chain, CATALOG.models[chain.model], _CFG).key)


def _store(source: Chain, decode: float) -> CorrectionStore:
    """Evidence of a ``decode``× slower decode step on ``source``, under its chain key and
    its stratum's (as S3 records it)."""
    skey = stratum_for(source, CATALOG.models[source.model], _CFG).key
    samples = [(k, DECODE_TIME, 1.0, decode, 1.0) for k in (_key(source), skey)]
    return CorrectionStore().record(samples, _CFG.corrections)


def _planned(state: PlannerState) -> PlannerState:
    """``state`` with what one tick planning ``_CHAIN`` holds of what it borrowed."""
    fn = correction_fn(state, _JOB, gpus=CATALOG.gpus, models=CATALOG.models, cfg=_CFG)
    fn(_CHAIN)
    return attrs.evolve(state, held=state.held.with_borrowed(fn.borrowed))


def _decode(state: PlannerState) -> float:
    fn = correction_fn(state, _JOB, gpus=CATALOG.gpus, models=CATALOG.models, cfg=_CFG)
    return fn(_CHAIN).decode_time


@pytest.mark.parametrize("source", [_SIBLING, _ELSEWHERE], ids=["stratum", "model-elsewhere"])
def test_a_borrowed_correction_is_held_within_the_band_and_released_outside(
    source: Chain,
) -> None:
    base = Planner.initial_state(_CFG)
    first = _planned(attrs.evolve(base, corrections=_store(source, 1.40)))
    held = _decode(first)
    assert held == pytest.approx(1.40, rel=0.02)  # borrowed: the chain has no evidence
    assert _key(_CHAIN) in first.held.borrowed
    # The source's estimate moves by 3 % (inside the 5 % band): the chain keeps what it held.
    within = attrs.evolve(first, corrections=_store(source, 1.44))
    assert _decode(attrs.evolve(within, held=HeldInputs())) != held  # it did move
    assert _decode(within) == held
    # ... by 20 %: released, the chain takes the estimate.
    beyond = attrs.evolve(first, corrections=_store(source, 1.68))
    assert _decode(beyond) == pytest.approx(1.68, rel=0.02)


def _evaluator(state: PlannerState, memo: EvaluationMemo, shared: SharedCorrections) -> Evaluator:
    return Evaluator(
        snapshot=ClusterSnapshot(0.0, [_JOB], _POOLS, []),
        state=state,
        surrogate=_SURROGATE,
        gpus=CATALOG.gpus,
        models=CATALOG.models,
        dag=default_dag(),
        cfg=_CFG,
        reference_cost={_JOB.id: 0.2},
        shared_corrections=shared,
        memo=memo,
    )


def test_a_held_borrowed_correction_keeps_the_evaluation_in_the_memo() -> None:
    base = Planner.initial_state(_CFG)
    first = _planned(attrs.evolve(base, corrections=_store(_SIBLING, 1.40)))
    memo, shared = EvaluationMemo(), SharedCorrections()
    before = _evaluator(first, memo, shared).evaluate(_JOB, _LADDER, key="c")
    # The next tick: the stratum's estimate moved within the band, ε and λ moved too.
    later = attrs.evolve(
        first,
        corrections=_store(_SIBLING, 1.44),
        epsilon=EpsilonCalibrator(eps=0.31),
        calibration=attrs.evolve(first.calibration, lam=first.calibration.lam * 1.5),
    )
    later = attrs.evolve(later, held=attrs.evolve(later.held, eps=first.epsilon.eps))
    hits = memo.hits
    again = _evaluator(later, memo, shared).evaluate(_JOB, _LADDER, key="c")
    assert memo.hits == hits + 1
    fresh = _evaluator(later, EvaluationMemo(), SharedCorrections()).evaluate(
        _JOB, _LADDER, key="c"
    )
    assert again == fresh  # λ re-weighed on the hit, as a fresh evaluation weighs it
    assert again.prediction == before.prediction
    # Out of the band: the evaluation is redone.
    moved = attrs.evolve(first, corrections=_store(_SIBLING, 1.68))
    hits = memo.hits
    redone = _evaluator(moved, memo, shared).evaluate(_JOB, _LADDER, key="c")
    assert memo.hits == hits
    assert redone.prediction != before.prediction


def test_held_eps_and_residuals_move_only_past_the_band_hysteresis() -> None:
    stratum = Stratum.from_key(stratum_for(_CHAIN, CATALOG.models[_CHAIN.model], _CFG).key)
    window = tuple(0.1 * ((k % 5) - 2) for k in range(20))
    history = ResidualHistory(window=36).add_residuals(
        (stratum, Outcome.TTFT.value, r) for r in window
    )
    held = held_inputs(HeldInputs(), eps=0.5, residuals=history, z_star={}, cfg=_CFG)
    assert held.eps == 0.5
    assert held.residuals == history
    # One more ordinary residual and a small step of ε: both held.
    more = history.add_residual(stratum, Outcome.TTFT.value, 0.05)
    kept = held_inputs(held, eps=0.53, residuals=more, z_star={}, cfg=_CFG)
    assert kept.eps == 0.5
    assert kept.residuals is not None
    assert kept.residuals.get(stratum, Outcome.TTFT.value) == window
    # A run of large misses widens the band past the hysteresis; ε moves by 0.3: released.
    wide = more.add_residuals((stratum, Outcome.TTFT.value, 2.0) for _ in range(6))
    released = held_inputs(kept, eps=0.8, residuals=wide, z_star={}, cfg=_CFG)
    assert released.eps == 0.8
    assert released.residuals is not None
    assert released.residuals.get(stratum, Outcome.TTFT.value) == wide.get(
        stratum, Outcome.TTFT.value
    )


def test_held_ideal_point_moves_only_past_the_hysteresis() -> None:
    z0 = {"a": {Outcome.COST: 1.0}}
    held = held_inputs(HeldInputs(), eps=0.3, residuals=ResidualHistory(), z_star=z0, cfg=_CFG)
    near = held_inputs(
        held, eps=0.3, residuals=ResidualHistory(), z_star={"a": {Outcome.COST: 0.97}}, cfg=_CFG
    )
    assert near.z_star["a"][Outcome.COST] == 1.0
    far = held_inputs(
        near, eps=0.3, residuals=ResidualHistory(), z_star={"a": {Outcome.COST: 0.8}}, cfg=_CFG
    )
    assert far.z_star["a"][Outcome.COST] == 0.8


def test_the_evaluator_reads_the_band_and_ideal_point_in_force() -> None:
    base = Planner.initial_state(_CFG)
    state = attrs.evolve(
        base,
        epsilon=EpsilonCalibrator(eps=2.0),
        held=HeldInputs(eps=base.epsilon.eps, z_star={_JOB.id: {Outcome.COST: 0.01}}),
    )
    as_held = attrs.evolve(base, z_star={_JOB.id: {Outcome.COST: 0.01}})
    memo, shared = EvaluationMemo(), SharedCorrections()
    got = _evaluator(state, memo, shared).evaluate(_JOB, _LADDER, key="c")
    want = _evaluator(as_held, EvaluationMemo(), SharedCorrections()).evaluate(
        _JOB, _LADDER, key="c"
    )
    assert got == want
    raw = _evaluator(attrs.evolve(state, held=HeldInputs()), EvaluationMemo(), SharedCorrections())
    assert raw.evaluate(_JOB, _LADDER, key="c") != got


def test_held_inputs_survive_a_checkpoint() -> None:
    base = Planner.initial_state(_CFG)
    state = _planned(attrs.evolve(base, corrections=_store(_SIBLING, 1.40)))
    stratum = Stratum.from_key(stratum_for(_CHAIN, CATALOG.models[_CHAIN.model], _CFG).key)
    history = ResidualHistory(window=36).add_residual(stratum, Outcome.TPOT.value, 0.2)
    held = held_inputs(
        state.held, eps=0.4, residuals=history, z_star={"a": {Outcome.COST: 0.5}}, cfg=_CFG
    )
    state = attrs.evolve(state, held=held)
    again = PlannerState.from_data(state.to_data(), cusum=_CFG.cusum)
    assert again.held == state.held
    # A checkpoint from before the held inputs resumes with nothing held.
    old = state.to_data()
    del old["held"]
    assert PlannerState.from_data(old, cusum=_CFG.cusum).held == HeldInputs()


@pytest.mark.parametrize("outcome", [Outcome.TTFT, Outcome.TPOT, Outcome.THROUGHPUT])
def test_an_evaluation_is_redone_when_any_band_it_reads_moved(outcome: Outcome) -> None:
    # An online job's breach reads its p99s' bands and its capacity's (throughput) band.
    stratum = Stratum.from_key(stratum_for(_CHAIN, CATALOG.models[_CHAIN.model], _CFG).key)
    base = Planner.initial_state(_CFG)
    memo, shared = EvaluationMemo(), SharedCorrections()
    _evaluator(base, memo, shared).evaluate(_JOB, _LADDER, key="c")
    misses = ResidualHistory(window=36).add_residuals(
        (stratum, outcome.value, 3.0) for _ in range(8)
    )
    moved = attrs.evolve(base, held=HeldInputs(residuals=misses))
    hits = memo.hits
    got = _evaluator(moved, memo, shared).evaluate(_JOB, _LADDER, key="c")
    assert memo.hits == hits
    fresh = _evaluator(moved, EvaluationMemo(), SharedCorrections()).evaluate(
        _JOB, _LADDER, key="c"
    )
    assert got == fresh
