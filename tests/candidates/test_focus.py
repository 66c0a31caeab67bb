"""The candidate generator's focus: the DAG backward query and the matching mechanisms are live."""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest

from koi.beliefs import Beta
from koi.candidates import ProposalContext, at_risk_outcomes, changed_decisions
from koi.dag import (
    CausalDag,
    Decision,
    EdgeKey,
    Mechanism,
    Scope,
    default_dag,
    mechanism_id,
)
from koi.plugins import DefaultProposer
from koi.surrogate import Surrogate
from koi.testing.fakes import example_gpus, example_models, example_snapshot
from koi.types import ClusterSnapshot, Job, Ladder, Outcome, Outcomes

# A sparse graph: quant and the batch cap reach TPOT; only the GPU type reaches TTFT.
NARROW = CausalDag.from_edges(
    [
        ("x:quant", "v:mem_bw_util", "weight bytes per decode step"),
        ("v:mem_bw_util", "y:p99_tpot_ms", "decode is memory-bound"),
        ("x:max_batch_size", "v:mean_batch_size", "the cap bounds the batch"),
        ("v:mean_batch_size", "y:p99_tpot_ms", "bigger batches, longer steps"),
        ("x:gpu_type", "v:compute_util", "peak FLOPS"),
        ("v:compute_util", "y:p99_ttft_ms", "prefill is compute-bound"),
    ]
)
TPOT_EDGES: tuple[EdgeKey, ...] = (("x:quant", "v:mem_bw_util"), ("v:mem_bw_util", "y:p99_tpot_ms"))


@pytest.fixture
def snapshot() -> ClusterSnapshot:
    return example_snapshot()


@pytest.fixture
def chat(snapshot: ClusterSnapshot) -> Job:
    return snapshot.job("chat")


@pytest.fixture
def incumbent(snapshot: ClusterSnapshot) -> Ladder:
    return snapshot.current_ladders["chat"]  # 8B, one L4, tp=1, bf16, batch 64


@pytest.fixture
def proposer() -> DefaultProposer:
    return DefaultProposer(Surrogate(example_gpus(), example_models()))


def propose(
    proposer: DefaultProposer, job: Job, snapshot: ClusterSnapshot, **kw: Any
) -> list[Ladder]:
    base: dict[str, Any] = {
        "snapshot": snapshot,
        "gpus": example_gpus(),
        "models": example_models(),
        "deadline_s": time.monotonic() + 30.0,
        "incumbent": snapshot.current_ladders.get(job.id),
        "max_candidates": 12,
    }
    base.update(kw)
    return proposer.koi_propose_ladders(job, ProposalContext(**base))


def varied(ladders: list[Ladder], incumbent: Ladder) -> set[Decision]:
    return {d for lad in ladders for d in changed_decisions(lad, incumbent)}


def mechanism(scope: str, belief: Beta) -> Mechanism:
    parsed = Scope.parse(scope)
    return Mechanism(mechanism_id(TPOT_EDGES, parsed), TPOT_EDGES, parsed, "test", belief)


# ---- the backward query ---------------------------------------------------------------------
def test_backward_decisions_follow_the_view_and_its_confidences() -> None:
    tpot = dict(NARROW.view().decisions_for([Outcome.TPOT], 0.05))
    assert set(tpot) == {Decision.QUANT, Decision.MAX_BATCH_SIZE}
    assert tpot[Decision.QUANT] == pytest.approx(0.25)  # untested edges: 0.5 x 0.5
    assert set(dict(NARROW.view().decisions_for([Outcome.TTFT], 0.05))) == {Decision.GPU_TYPE}

    # Evidence against the quant edge drops its route below the threshold.
    def doubted(edge: EdgeKey) -> float:
        return 0.05 if edge[0] == "x:quant" else 0.9

    routes = NARROW.view(confidence=doubted).decisions_for([Outcome.TPOT], 0.05)
    assert [d for d, _ in routes] == [Decision.MAX_BATCH_SIZE]
    # Routing moves TTFT through the queue in the registered graph, not TPOT.
    full = default_dag().view()
    assert Decision.ROUTING in dict(full.decisions_for([Outcome.TTFT], 0.05))
    assert Decision.ROUTING not in dict(full.decisions_for([Outcome.TPOT], 0.05))


def test_at_risk_outcomes_are_the_bounds_within_the_margin(chat: Job) -> None:
    near = Outcomes(
        cost_per_mtok_usd=1.0,
        p99_ttft_ms=500.0,  # bound 800
        p99_tpot_ms=55.0,  # bound 60
        throughput_tok_s=800.0,
        slo_margin=0.1,
    )
    assert at_risk_outcomes(chat, near, 0.15) == (Outcome.TPOT,)
    assert at_risk_outcomes(chat, near, 0.5) == (Outcome.TTFT, Outcome.TPOT)


# ---- the DAG view changes the short list ----------------------------------------------------
def test_a_decision_outside_the_backward_query_is_not_varied(
    proposer: DefaultProposer, chat: Job, snapshot: ClusterSnapshot, incumbent: Ladder
) -> None:
    unfocused = propose(proposer, chat, snapshot)
    assert {Decision.GPU_TYPE, Decision.TP} <= varied(unfocused, incumbent)

    focused = propose(proposer, chat, snapshot, dag=NARROW.view(), at_risk=("y:p99_tpot_ms",))
    assert focused
    assert varied(focused, incumbent) <= {Decision.QUANT, Decision.MAX_BATCH_SIZE}
    # ... and the decisions in it are: a move that changes only the quantization.
    assert any(changed_decisions(lad, incumbent) == {Decision.QUANT} for lad in focused)
    assert any(changed_decisions(lad, incumbent) == {Decision.MAX_BATCH_SIZE} for lad in focused)


def test_an_incumbent_on_an_unlisted_engine_is_focused_as_on_a_listed_one(
    proposer: DefaultProposer, chat: Job, snapshot: ClusterSnapshot, incumbent: Ladder
) -> None:
    # The host runs the job on SGLang; the screen lists vLLM only, so every candidate changes
    # the engine, and the focus still names what else it may change.
    (rank,) = incumbent.ranks
    chain = attrs.evolve(rank.chain, config=attrs.evolve(rank.chain.config, engine="sglang"))
    on_sglang = Ladder((attrs.evolve(rank, chain=chain),))
    running = attrs.evolve(
        snapshot,
        active=[
            attrs.evolve(a, ladder=on_sglang) if a.job_id == "chat" else a for a in snapshot.active
        ],
    )
    focused = propose(
        proposer, chat, running, dag=NARROW.view(), at_risk=("y:p99_tpot_ms",), incumbent=on_sglang
    )
    moved = {changed_decisions(lad, on_sglang) - {Decision.ENGINE} for lad in focused}
    assert frozenset({Decision.QUANT}) in moved
    assert all(m <= {Decision.QUANT, Decision.MAX_BATCH_SIZE} for m in moved)


def test_the_at_risk_outcome_picks_the_decisions(
    proposer: DefaultProposer, chat: Job, snapshot: ClusterSnapshot, incumbent: Ladder
) -> None:
    ttft = propose(proposer, chat, snapshot, dag=NARROW.view(), at_risk=("y:p99_ttft_ms",))
    assert ttft
    assert varied(ttft, incumbent) == {Decision.GPU_TYPE}


def test_without_an_incumbent_the_whole_enumeration_competes(
    proposer: DefaultProposer, snapshot: ClusterSnapshot
) -> None:
    pending = snapshot.job("summarize")
    cold = propose(proposer, pending, snapshot)
    with_dag = propose(proposer, pending, snapshot, dag=NARROW.view(), at_risk=("y:p99_tpot_ms",))
    assert cold
    assert with_dag == cold


# ---- the mechanisms change the short list ---------------------------------------------------
def test_a_confident_mechanism_on_an_at_risk_outcome_demotes_its_scope(
    proposer: DefaultProposer, chat: Job, snapshot: ClusterSnapshot
) -> None:
    kw: dict[str, Any] = {"max_candidates": 2, "at_risk": ("y:p99_tpot_ms",)}
    plain = propose(proposer, chat, snapshot, **kw)
    assert all(lad.ranks[0].chain.environment.gpu == "L4" for lad in plain)

    confident = mechanism("gpu == L4", Beta(20.0, 1.0))
    steered = propose(proposer, chat, snapshot, mechanisms=(confident,), **kw)
    assert steered
    assert all(lad.ranks[0].chain.environment.gpu != "L4" for lad in steered)

    # Not at risk on what it moves (TPOT): the mechanism does not apply to this job's choice.
    unrelated = propose(
        proposer,
        chat,
        snapshot,
        mechanisms=(confident,),
        max_candidates=2,
        at_risk=("y:p99_ttft_ms",),
    )
    assert unrelated == propose(
        proposer, chat, snapshot, max_candidates=2, at_risk=("y:p99_ttft_ms",)
    )


def test_an_untested_mechanism_gets_a_ladder_in_its_scope(
    proposer: DefaultProposer, chat: Job, snapshot: ClusterSnapshot
) -> None:
    def in_scope(lad: Ladder) -> bool:
        chain = lad.ranks[0].chain
        return chain.environment.gpu == "H100-SXM" and chain.config.quant.value == "fp8"

    plain = propose(proposer, chat, snapshot, max_candidates=4)
    assert not any(in_scope(lad) for lad in plain)
    untested = mechanism("gpu == H100-SXM and quant == fp8", Beta.uniform())
    tested = propose(proposer, chat, snapshot, max_candidates=4, mechanisms=(untested,))
    assert any(in_scope(lad) for lad in tested)


@pytest.mark.parametrize(
    "precisions", [("bf16",), ("fp8",), ("int4",), ("bf16", "int4"), ("bf16", "fp8", "int4")]
)
def test_proposals_and_sizings_keep_to_the_job_precisions(
    proposer: DefaultProposer, snapshot: ClusterSnapshot, chat: Job, precisions: tuple[str, ...]
) -> None:
    job = attrs.evolve(chat, precisions=precisions)
    ladders = propose(proposer, job, snapshot, incumbent=None)
    assert ladders
    used = {r.chain.config.quant.value for lad in ladders for r in lad.ranks}
    assert used <= set(precisions)
    sized = proposer.generator.screener.sized_options(
        job, [p.environment for p in snapshot.pools], example_gpus(), now_s=0.0
    )
    assert sized
    # Every precision the job accepts is searched (both example GPUs have FP8 tensor cores),
    # and no other.
    assert {s.option.config.quant.value for s in sized} == set(precisions)


def test_neighbours_of_an_incumbent_the_policy_forbids_are_not_proposed(
    proposer: DefaultProposer, snapshot: ClusterSnapshot, chat: Job, incumbent: Ladder
) -> None:
    # The owner narrowed the job to FP8 while it runs BF16: no ±1-replica BF16 neighbour.
    job = attrs.evolve(chat, precisions=["fp8"])
    ladders = propose(proposer, job, snapshot, incumbent=incumbent)
    assert ladders
    assert all(job.precision_problem(lad) is None for lad in ladders)
    # Under the default policy the incumbent's BF16 neighbours are proposed.
    neighbours = propose(proposer, chat, snapshot, incumbent=incumbent)
    assert any(
        lad.ranks[0].chain == incumbent.ranks[0].chain and lad != incumbent for lad in neighbours
    )
