"""Mechanism admission: each invalid kind is rejected with its reason."""

from __future__ import annotations

import pytest
from tests._support.evidence import H100, L40S, LLAMA8B, online_job, rank

from koi.beliefs import Beta
from koi.dag import (
    Mechanism,
    MechanismProposal,
    RankContext,
    admit_mechanism,
    default_dag,
)
from koi.errors import InvalidInput

DAG = default_dag()
PATH = [("x:tp", "v:comm_share"), ("v:comm_share", "y:p99_tpot_ms")]


def propose(edges: list[tuple[str, str]] = PATH, scope: str = "tp >= 4") -> MechanismProposal:
    return MechanismProposal(edges=edges, scope=scope, statement="TP all-reduces slow decode")


def test_valid_mechanism_is_admitted_at_uniform_belief() -> None:
    result = admit_mechanism(propose(), DAG)
    assert result.accepted
    assert result.mechanism is not None
    assert result.mechanism.belief == Beta(1, 1)
    assert result.mechanism.decisions == ("x:tp",)
    assert result.mechanism.mediators == ("v:comm_share",)
    assert result.mechanism.outcomes == ("y:p99_tpot_ms",)


def test_branching_subgraph_is_admitted() -> None:
    edges = [
        ("x:tp", "v:comm_share"),
        ("x:interconnect", "v:comm_share"),
        ("v:comm_share", "y:p99_tpot_ms"),
        ("v:comm_share", "y:p99_ttft_ms"),
    ]
    assert admit_mechanism(propose(edges), DAG).accepted


@pytest.mark.parametrize(
    ("edges", "scope", "reason"),
    [
        ([("x:tp", "v:queue_depth"), ("v:queue_depth", "y:p99_ttft_ms")], "", "unregistered"),
        ([("x:tp", "y:p99_tpot_ms")], "", "unregistered"),
        ([("x:tp", "v:comm_share")], "", "reaches no outcome"),
        ([("v:comm_share", "y:p99_tpot_ms")], "", "no decision reaches"),
        ([], "", "no edges"),
        (
            [
                *PATH,
                ("x:pp", "v:bubble_fraction"),
                ("v:bubble_fraction", "y:throughput_tok_s"),
            ],
            "",
            "not connected",
        ),
        (PATH, "tp >= 8 and tp < 2", "unsatisfiable scope"),
        ([("x:tp", "v:nonsense"), ("v:nonsense", "y:p99_tpot_ms")], "", "bad node name"),
    ],
)
def test_invalid_proposals_are_rejected_with_reason(
    edges: list[tuple[str, str]], scope: str, reason: str
) -> None:
    result = admit_mechanism(propose(edges, scope), DAG)
    assert not result.accepted
    assert result.mechanism is None
    assert reason in result.reason


def test_duplicates_are_rejected_even_with_equivalent_scope() -> None:
    first = admit_mechanism(propose(scope="tp >= 4 and interconnect == pcie"), DAG).mechanism
    assert first is not None
    again = propose(edges=list(reversed(PATH)), scope="interconnect == pcie and tp > 3")
    result = admit_mechanism(again, DAG, [first])
    assert not result.accepted
    assert result.reason == f"duplicate of mechanism {first.id}"
    # A different scope over the same edges is a different hypothesis.
    assert admit_mechanism(propose(scope="tp >= 8"), DAG, [first]).accepted


def test_scope_matching_against_a_rank() -> None:
    mech = admit_mechanism(propose(scope="interconnect == pcie and tp >= 4"), DAG).mechanism
    assert mech is not None
    on_l40s = RankContext.from_rank(rank(gpu=L40S, tp=4), LLAMA8B, L40S, online_job())
    on_h100 = RankContext.from_rank(rank(gpu=H100, tp=4), LLAMA8B, H100, online_job())
    assert mech.applies_to(on_l40s)
    assert not mech.applies_to(on_h100)


def test_mechanism_data_round_trip() -> None:
    mech = admit_mechanism(propose(scope="quant in (fp8, int4) and tp >= 2"), DAG).mechanism
    assert mech is not None
    mech = mech.with_belief(Beta(3.5, 1.0))
    assert Mechanism.from_data(mech.to_data()) == mech
    with pytest.raises(InvalidInput, match="statement"):
        Mechanism.from_data({k: v for k, v in mech.to_data().items() if k != "statement"})


def test_malformed_edges_raise() -> None:
    with pytest.raises(InvalidInput):
        MechanismProposal(edges=[("x:tp",)], statement="?")  # type: ignore[list-item]
