"""The evidence store, strata and the quadrant update table."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.evidence import H100, LLAMA8B, MIXTRAL, chain

from koi.beliefs import (
    Beta,
    EvidenceStore,
    Quadrant,
    Stratum,
    UpdateTable,
    Verdict,
    combined_verdict,
    stratum_of,
    update_for_evaluation,
    update_mechanism,
)
from koi.dag import default_dag
from koi.errors import InvalidInput

EDGES = default_dag().edges
S1 = Stratum("H100-SXM", "dense-s", "vllm")
S2 = Stratum("L40S", "moe-m", "sglang")
PATH = (("x:tp", "v:comm_share"), ("v:comm_share", "y:p99_tpot_ms"))

strata = st.sampled_from([S1, S2])
quadrants = st.sampled_from(list(Quadrant))
verdicts = st.sampled_from(list(Verdict))
evaluations = st.lists(
    st.tuples(
        st.lists(st.sampled_from(EDGES), min_size=1, max_size=4),
        strata,
        quadrants,
        st.dictionaries(st.sampled_from(EDGES), verdicts),
    ),
    max_size=12,
)


def test_stratum_of_chain() -> None:
    assert stratum_of(chain(gpu=H100), LLAMA8B) == Stratum("H100-SXM", "dense-s", "vllm")
    assert stratum_of(chain(model=MIXTRAL, engine="sglang"), MIXTRAL).engine == "sglang"
    with pytest.raises(InvalidInput):
        stratum_of(chain(), MIXTRAL)
    assert Stratum.from_key(S2.key) == S2
    with pytest.raises(InvalidInput):
        Stratum.from_key("H100|dense-s")


def test_missing_entries_read_as_uniform() -> None:
    store = EvidenceStore()
    assert store.get(PATH[0], S1) == Beta(1, 1)
    assert store.mean_uncertainty() == 1.0
    assert len(store) == 0


@given(strata, st.floats(0.1, 50), st.floats(0.1, 50))
def test_q1_raises_and_q4_lowers_confidence(stratum: Stratum, sup: float, con: float) -> None:
    start = EvidenceStore().apply(PATH, stratum, support=sup, contradict=con)
    up = update_for_evaluation(start, PATH, stratum, Quadrant.Q1)
    down = update_for_evaluation(start, PATH, stratum, Quadrant.Q4)
    for edge in PATH:
        assert up.confidence(edge, stratum) > start.confidence(edge, stratum)
        assert down.confidence(edge, stratum) < start.confidence(edge, stratum)
        assert up.get(edge, stratum).evidence > start.get(edge, stratum).evidence
    other = S2 if stratum == S1 else S1
    assert up.get(PATH[0], other) == Beta(1, 1)  # beliefs are local to the stratum


def test_mixed_quadrants_follow_the_verdicts() -> None:
    store = EvidenceStore()
    verdict = {PATH[0]: Verdict.ACCEPT, PATH[1]: Verdict.REJECT}
    for q in (Quadrant.Q2, Quadrant.Q3):
        after = update_for_evaluation(store, PATH, S1, q, verdict)
        assert after.confidence(PATH[0], S1) > 0.5
        assert after.confidence(PATH[1], S1) < 0.5
        undecided = update_for_evaluation(store, PATH, S1, q)
        assert undecided.get(PATH[0], S1) == Beta(1, 1)


@given(evaluations, st.randoms(use_true_random=False))
def test_updates_are_order_independent(
    evals: list[tuple[list[tuple[str, str]], Stratum, Quadrant, dict[tuple[str, str], Verdict]]],
    rnd: object,
) -> None:
    def run(order: list[int]) -> EvidenceStore:
        store = EvidenceStore()
        for i in order:
            edges, stratum, quadrant, verdict = evals[i]
            store = update_for_evaluation(store, edges, stratum, quadrant, verdict)
        return store

    order = list(range(len(evals)))
    shuffled = order[:]
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert run(order) == run(shuffled)


def test_update_table_is_documented_and_configurable() -> None:
    table = UpdateTable()
    assert table.amounts(Quadrant.Q1) == (1.0, 0.0)
    assert table.amounts(Quadrant.Q4, Verdict.ACCEPT) == (0.0, 1.0)
    assert table.amounts(Quadrant.Q2, Verdict.ACCEPT) == (0.5, 0.0)
    assert table.amounts(Quadrant.Q3, Verdict.REJECT) == (0.0, 1.0)
    assert table.amounts(Quadrant.Q3, Verdict.UNDECIDED) == (0.0, 0.0)
    strong = UpdateTable(q1=(2.0, 0.0))
    after = update_for_evaluation(EvidenceStore(), PATH, S1, Quadrant.Q1, table=strong)
    assert after.get(PATH[0], S1) == Beta(3, 1)
    with pytest.raises(InvalidInput):
        UpdateTable(q1=(-1.0, 0.0))


def test_mechanism_updates() -> None:
    assert update_mechanism(Beta(), Quadrant.Q1).confidence > 0.5
    assert update_mechanism(Beta(), Quadrant.Q4).confidence < 0.5
    assert update_mechanism(Beta(), Quadrant.Q2, [Verdict.ACCEPT, Verdict.ACCEPT]) == Beta(1.5, 1)
    assert update_mechanism(Beta(), Quadrant.Q3, [Verdict.ACCEPT, Verdict.REJECT]) == Beta(1, 2)
    assert update_mechanism(Beta(), Quadrant.Q3, [Verdict.ACCEPT, Verdict.UNDECIDED]) == Beta()
    assert combined_verdict([]) is Verdict.UNDECIDED


def test_mean_uncertainty_falls_with_evidence() -> None:
    keys = [(e, S1) for e in EDGES]
    store = EvidenceStore()
    before = store.mean_uncertainty(keys)
    for _ in range(5):
        store = update_for_evaluation(store, EDGES[:10], S1, Quadrant.Q1)
    assert store.mean_uncertainty(keys) < before == 1.0
    assert store.mean_uncertainty() < 1.0


@given(evaluations)
def test_json_round_trip(
    evals: list[tuple[list[tuple[str, str]], Stratum, Quadrant, dict[tuple[str, str], Verdict]]],
) -> None:
    store = EvidenceStore()
    for edges, stratum, quadrant, verdict in evals:
        store = update_for_evaluation(store, edges, stratum, quadrant, verdict)
    text = json.dumps(store.to_data())
    assert EvidenceStore.from_data(json.loads(text)) == store
    assert hash(EvidenceStore.from_data(json.loads(text))) == hash(store)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({}, "expected a list"),
        ([{"edge": ["x:tp"], "stratum": {}, "alpha": 1, "beta": 1}], "evidence[0]"),
        ([{"edge": ["x:tp", "v:comm_share"], "alpha": 1, "beta": 1}], "stratum"),
        (
            [
                {
                    "edge": ["x:tp", "v:comm_share"],
                    "stratum": {"gpu": "L4", "model_class": "dense-s", "engine": "vllm"},
                    "alpha": -1,
                    "beta": 1,
                }
            ],
            "alpha",
        ),
    ],
)
def test_bad_store_data_names_the_problem(data: object, where: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(where)):
        EvidenceStore.from_data(data)
