"""The causal graph: registered edges, refusal of invalid edges, backward query, view."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.dag import (
    REGISTERED_EDGES,
    CausalDag,
    DagView,
    Decision,
    NodeKind,
    default_dag,
    node_kind,
    node_name,
)
from koi.errors import CycleError, InvalidInput
from koi.types import Mediator, Outcome, from_json, to_json

DAG = default_dag()
ALL_NODES = [node_name(m) for m in (*Decision, *Mediator, *Outcome)]


def test_registered_set_is_curated_not_dense() -> None:
    assert 30 <= len(DAG) <= 80  # a few dozen, far from the dense 11*10 + 10*5
    assert len(DAG) == len(REGISTERED_EDGES)


@given(st.sampled_from(DAG.edges))
def test_every_registered_edge_is_x_to_v_or_v_to_y(edge: tuple[str, str]) -> None:
    kinds = (node_kind(edge[0]), node_kind(edge[1]))
    assert kinds in {(NodeKind.X, NodeKind.V), (NodeKind.V, NodeKind.Y)}
    assert DAG.reason(edge).strip()


def test_every_node_is_wired() -> None:
    # Every decision acts through some mediator; every mediator is caused and causes.
    for x in DAG.nodes(NodeKind.X):
        assert DAG.children(x), x
    for v in DAG.nodes(NodeKind.V):
        assert DAG.parents(v), v
        assert DAG.children(v), v
    assert set(DAG.nodes()) == set(ALL_NODES)


@pytest.mark.parametrize("outcome", list(Outcome))
def test_backward_from_each_outcome_reaches_a_decision(outcome: Outcome) -> None:
    paths = DAG.backward(outcome)
    assert paths
    for path in paths:
        assert all(e in DAG for e in path.edges)
        assert path.outcome is outcome
    assert DAG.backward(node_name(outcome)) == paths


@given(st.dictionaries(st.sampled_from(DAG.edges), st.floats(0.0, 1.0)))
def test_backward_is_ranked_by_confidence(conf: dict[tuple[str, str], float]) -> None:
    def lookup(edge: tuple[str, str]) -> float:
        return conf.get(edge, 0.5)

    paths = DAG.backward(Outcome.TTFT, lookup)
    values = [p.confidence for p in paths]
    assert values == sorted(values, reverse=True)
    for p in paths:
        (xv, vy) = p.edges
        assert p.confidence == pytest.approx(lookup(xv) * lookup(vy))
    best = dict(DAG.decisions_for(Outcome.TTFT, lookup))
    assert set(best) == {p.decision for p in paths}


def test_backward_follows_evidence() -> None:
    # Make the tp -> comm_share -> tpot route certain and everything else doubtful.
    strong = {("x:tp", "v:comm_share"), ("v:comm_share", "y:p99_tpot_ms")}
    top = DAG.backward(Outcome.TPOT, lambda e: 0.95 if e in strong else 0.3)[0]
    assert (top.decision, top.mediator) == (Decision.TP, Mediator.COMM_SHARE)


def test_backward_refuses_non_outcomes() -> None:
    with pytest.raises(InvalidInput):
        DAG.backward("v:queue_depth")
    with pytest.raises(InvalidInput):
        DAG.backward("y:latency")


@given(st.sampled_from(ALL_NODES), st.sampled_from(ALL_NODES))
def test_add_edge_refuses_anything_but_x_v_or_v_y(parent: str, child: str) -> None:
    kinds = (node_kind(parent), node_kind(child))
    if kinds in {(NodeKind.X, NodeKind.V), (NodeKind.V, NodeKind.Y)}:
        if (parent, child) in DAG:
            with pytest.raises(InvalidInput, match="registered twice"):
                DAG.add_edge(parent, child, "again")
        else:
            grown = DAG.add_edge(parent, child, "test reason")
            assert (parent, child) in grown
            assert (parent, child) not in DAG  # the original is untouched
            assert len(grown) == len(DAG) + 1
    else:
        with pytest.raises(CycleError):
            DAG.add_edge(parent, child, "test reason")


@pytest.mark.parametrize(
    ("parent", "child", "reason"),
    [
        ("x:colour", "v:queue_depth", "r"),
        ("tp", "v:queue_depth", "r"),
        ("x:tp", "v:latency", "r"),
        ("x:tp", "v:queue_depth", "  "),
    ],
)
def test_add_edge_refuses_bad_names_and_reasons(parent: str, child: str, reason: str) -> None:
    with pytest.raises(InvalidInput):
        DAG.add_edge(parent, child, reason)


def test_graph_is_read_only() -> None:
    with pytest.raises(nx.NetworkXError):
        DAG.graph.add_edge("x:tp", "y:p99_ttft_ms")
    assert default_dag() is DAG


def test_from_edges_rejects_a_skip_edge() -> None:
    with pytest.raises(CycleError, match="X -> Y"):
        CausalDag.from_edges([("x:tp", "y:p99_ttft_ms", "skips the mediator")])


def test_view_is_json_round_trippable_and_annotated() -> None:
    view = DAG.view(confidence=lambda e: 0.75, uncertainty=lambda e: 0.5)
    assert len(view.edges) == len(DAG)
    assert all(e.confidence == 0.75 and e.uncertainty == 0.5 for e in view.edges)
    assert from_json(to_json(view), DagView) == view
    assert {e.source for e in view.edges_into("v:comm_share")} >= {"x:tp", "x:interconnect"}
    assert view.edges_from("v:bubble_fraction")
    bare = DAG.view()
    assert bare.edges[0].confidence is None
