"""Which edges a rank exercises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from tests._support.evidence import H100, L40S, LLAMA8B, MODELS, chain, rank

from koi.beliefs import Stratum
from koi.dag import Decision, NodeKind, default_dag, exercised_edges, exercised_keys, node_kind
from koi.types import Ladder

DAG = default_dag()


def _decisions(edges: frozenset[tuple[str, str]]) -> set[str]:
    return {u for u, _ in edges if node_kind(u) is NodeKind.X}


def test_plain_rank_exercises_only_what_it_sets() -> None:
    edges = exercised_edges(chain(tp=1), 1)
    assert _decisions(edges) == {
        "x:gpu_type",
        "x:engine",
        "x:max_batch_size",
        "x:max_batched_tokens",
    }
    assert ("v:bubble_fraction", "y:throughput_tok_s") not in edges
    assert ("v:comm_share", "y:p99_tpot_ms") not in edges


def test_setting_a_knob_exercises_its_edges() -> None:
    base = _decisions(exercised_edges(chain(), 1))
    assert _decisions(exercised_edges(chain(tp=4), 1)) - base == {"x:tp", "x:interconnect"}
    assert _decisions(exercised_edges(chain(pp=2), 1)) - base == {"x:pp", "x:interconnect"}
    assert _decisions(exercised_edges(chain(quant="fp8"), 1)) - base == {"x:quant"}
    assert _decisions(exercised_edges(chain(), 3)) - base == {"x:replicas", "x:routing"}
    assert _decisions(exercised_edges(chain(market="spot"), 1)) - base == {"x:market"}
    pp_edges = exercised_edges(chain(pp=2), 1)
    assert ("v:bubble_fraction", "y:throughput_tok_s") in pp_edges


@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2]),
    quant=st.sampled_from(["bf16", "fp8", "int4"]),
    replicas=st.integers(1, 4),
    market=st.sampled_from(["on_demand", "spot", "reserved"]),
)
def test_exercised_edges_are_registered_paths(
    tp: int, pp: int, quant: str, replicas: int, market: str
) -> None:
    edges = exercised_edges(chain(tp=tp, pp=pp, quant=quant, market=market), replicas)
    assert edges <= set(DAG.edges)
    reached = {v for u, v in edges if node_kind(u) is NodeKind.X}
    for u, _ in edges:
        if node_kind(u) is NodeKind.V:
            assert u in reached  # a V -> Y edge is only exercised through its mediator
    assert (Decision.TP.value in {d[2:] for d in _decisions(edges)}) == (tp > 1)


def test_exercised_keys_are_stratified() -> None:
    ladder = Ladder((rank(gpu=H100, tp=2), rank(gpu=L40S)))
    keys = exercised_keys(ladder, MODELS)
    strata = {s for _, s in keys}
    assert strata == {
        Stratum("H100-SXM", LLAMA8B.size_class, "vllm"),
        Stratum("L40S", LLAMA8B.size_class, "vllm"),
    }
    h100_tp = (("x:tp", "v:comm_share"), Stratum("H100-SXM", "dense-s", "vllm"))
    l40s_tp = (("x:tp", "v:comm_share"), Stratum("L40S", "dense-s", "vllm"))
    assert h100_tp in keys
    assert l40s_tp not in keys
    assert exercised_keys(rank(gpu=L40S), MODELS) <= keys
