"""Scopes: parsing, matching, canonical forms and satisfiability."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests._support.evidence import H100, L40S, LLAMA8B, MIXTRAL, online_job, rank

from koi.dag import Predicate, RankContext, Scope
from koi.errors import InvalidInput


def ctx(**kw: object) -> RankContext:
    gpu = kw.pop("gpu", H100)
    model = kw.pop("model", LLAMA8B)
    replicas = kw.pop("replicas", 1)
    r = rank(replicas=replicas, gpu=gpu, model=model, **kw)  # type: ignore[arg-type]
    return RankContext.from_rank(r, model, gpu, online_job(model))  # type: ignore[arg-type]


def test_context_from_rank() -> None:
    c = ctx(gpu=L40S, model=MIXTRAL, tp=4, quant="fp8", replicas=2)
    assert (c.gpu, c.interconnect.value, c.tp, c.quant.value, c.replicas) == (
        "L40S",
        "pcie",
        4,
        "fp8",
        2,
    )
    assert c.is_moe
    assert c.size_class == MIXTRAL.size_class
    assert (c.job_class.value, c.input_len) == ("online", 1000.0)
    with pytest.raises(InvalidInput, match="gpu"):
        RankContext.from_rank(rank(gpu=L40S), LLAMA8B, H100, online_job())


def test_paper_example_scope_matches_pcie_tp4() -> None:
    scope = Scope.parse("interconnect == pcie and tp >= 4")
    assert scope.matches(ctx(gpu=L40S, tp=4))
    assert not scope.matches(ctx(gpu=L40S, tp=2))
    assert not scope.matches(ctx(gpu=H100, tp=8))
    assert Scope().matches(ctx())
    assert Scope.parse("always") == Scope()


def test_in_and_bool_and_names() -> None:
    scope = Scope.parse("quant in (fp8, int4) and is_moe == false and model != Phi-4")
    assert scope.matches(ctx(quant="int4"))
    assert not scope.matches(ctx(quant="bf16"))
    assert not scope.matches(ctx(model=MIXTRAL, quant="fp8"))


@pytest.mark.parametrize(
    "text",
    [
        "colour == red",
        "tp >> 4",
        "quant < fp8",
        "quant == fp4",
        "tp == 2.5",
        "is_moe == maybe",
        "tp in ()",
        "tp",
    ],
)
def test_bad_scopes_raise(text: str) -> None:
    with pytest.raises(InvalidInput):
        Scope.parse(text)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("tp < 2", "tp == 1"),
        ("tp >= 2 and tp <= 3", "tp in (2, 3)"),
        ("quant != bf16", "quant in (fp8, int4)"),
        ("tp >= 4 and interconnect == pcie", "interconnect == pcie and tp > 3"),
        ("input_len > 100 and input_len > 50", "input_len > 100"),
        ("is_moe == true and is_moe != false", "is_moe == true"),
        ("market in (spot, on_demand, reserved)", "always"),
    ],
)
def test_equivalent_scopes_share_a_canonical_form(a: str, b: str) -> None:
    assert Scope.parse(a).equivalent(Scope.parse(b))


@pytest.mark.parametrize(
    "text",
    [
        "tp >= 8 and tp < 2",
        "quant == fp8 and quant == int4",
        "model == Phi-4 and model != Phi-4",
        "input_len > 100 and input_len < 50",
        "input_len >= 100 and input_len < 100",
        "tp == 0",
        "tp in (2, 4) and tp > 4",
        "is_moe == true and is_moe == false",
    ],
)
def test_unsatisfiable_scopes_are_detected(text: str) -> None:
    assert not Scope.parse(text).satisfiable


_OPS = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])


@given(st.lists(st.tuples(_OPS, st.integers(0, 20)), min_size=1, max_size=4))
def test_integer_satisfiability_agrees_with_enumeration(
    clauses: list[tuple[str, int]],
) -> None:
    scope = Scope(tuple(Predicate.make("tp", op, v) for op, v in clauses))
    witnesses = [t for t in range(1, 40) if scope.matches(ctx(tp=t))]
    assert scope.satisfiable == bool(witnesses)


@given(st.lists(st.tuples(_OPS, st.integers(0, 10)), min_size=1, max_size=3))
def test_text_round_trip(clauses: list[tuple[str, int]]) -> None:
    scope = Scope(tuple(Predicate.make("max_batch_size", op, v) for op, v in clauses))
    again = Scope.parse(scope.to_text())
    assert again == scope
    assert again.canonical() == scope.canonical()


def test_direct_predicates_are_validated() -> None:
    assert Predicate("tp", ">=", 4) == Predicate.make("tp", ">=", "4")
    with pytest.raises(InvalidInput, match="normalised"):
        Predicate("quant", "in", ["fp8"])
    with pytest.raises(InvalidInput, match="unknown field"):
        Predicate("colour", "==", "red")
