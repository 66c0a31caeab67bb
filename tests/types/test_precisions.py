"""Job.precisions: the owner's accepted weight precisions, their default, checks and serde."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given

import koi.testing as kt
from koi.errors import InvalidInput
from koi.testing.fakes import example_snapshot
from koi.types import (
    DEFAULT_PRECISIONS,
    ClusterSnapshot,
    Job,
    Ladder,
    Quant,
    Rank,
    from_data,
    from_json,
    precision_verdict,
    to_data,
    to_json,
)

SNAP = example_snapshot()
CHAT = SNAP.job("chat")
RUNNING = SNAP.current_ladders["chat"]  # one L4, bf16


def _in(quant: str, ladder: Ladder = RUNNING) -> Ladder:
    """``ladder`` with every rank's weights in ``quant``."""
    return Ladder(
        tuple(
            attrs.evolve(
                r, chain=attrs.evolve(r.chain, config=attrs.evolve(r.chain.config, quant=quant))
            )
            for r in ladder.ranks
        )
    )


def test_default_is_bf16_and_fp8_only() -> None:
    assert DEFAULT_PRECISIONS == (Quant.BF16, Quant.FP8)
    assert CHAT.precisions == DEFAULT_PRECISIONS
    assert CHAT.accepts(Quant.BF16)
    assert CHAT.accepts(Quant.FP8)
    assert not CHAT.accepts(Quant.INT4)


def test_names_become_a_canonical_duplicate_free_tuple() -> None:
    job = attrs.evolve(CHAT, precisions=["int4", "bf16", "int4"])
    assert job.precisions == (Quant.BF16, Quant.INT4)
    assert job == attrs.evolve(CHAT, precisions=(Quant.BF16, Quant.INT4))
    assert hash(job) == hash(attrs.evolve(CHAT, precisions={"bf16", "int4"}))


@pytest.mark.parametrize("bad", ["bf16", [], ["int8"], ["bf16", 4], 3, None])
def test_bad_precision_sets_are_named(bad: Any) -> None:
    with pytest.raises(InvalidInput, match=r"^precisions: must be a non-empty list of"):
        attrs.evolve(CHAT, precisions=bad)


def test_precision_problem_names_the_policy_the_rank_and_the_job() -> None:
    assert CHAT.precision_problem(RUNNING) is None
    assert CHAT.precision_problem(Ladder()) is None
    two = Ladder((*RUNNING.ranks, Rank(attrs.evolve(_in("int4").ranks[0].chain), 2)))
    assert CHAT.precision_problem(two) == (
        "precision policy: ranks[1]: int4 is outside the accepted precisions (bf16, fp8) "
        "of job chat"
    )
    bf16_only = attrs.evolve(CHAT, precisions=["bf16"])
    assert bf16_only.precision_problem(_in("fp8")) is not None
    assert attrs.evolve(CHAT, precisions=["int4"]).precision_problem(_in("int4")) is None


def test_an_fp8_kv_cache_needs_fp8_accepted() -> None:
    def kv(dtype: str, quant: str = "bf16") -> Ladder:
        (r,) = _in(quant).ranks
        cfg = attrs.evolve(r.chain.config, kv_cache_dtype=dtype)
        return Ladder((attrs.evolve(r, chain=attrs.evolve(r.chain, config=cfg)),))

    bf16_only = attrs.evolve(CHAT, precisions=["bf16"])
    assert bf16_only.precision_problem(kv("auto")) is None
    assert bf16_only.precision_problem(kv("fp8")) == (
        "precision policy: ranks[0]: KV cache fp8 is outside the accepted precisions (bf16) "
        "of job chat"
    )
    assert CHAT.precision_problem(kv("fp8")) is None
    # The weights are named first when both break the policy.
    assert "int4 is outside" in (bf16_only.precision_problem(kv("fp8", "int4")) or "")


def test_precision_verdict_is_the_rule() -> None:
    assert precision_verdict(Quant.FP8, DEFAULT_PRECISIONS) is None
    assert precision_verdict(Quant.INT4, {Quant.FP8, Quant.BF16}) == (
        "int4 is outside the accepted precisions (bf16, fp8)"
    )


def test_snapshot_json_carries_precisions_and_old_snapshots_get_the_default() -> None:
    job = attrs.evolve(CHAT, precisions=["bf16", "int4"])
    snap = attrs.evolve(SNAP, jobs=(job, SNAP.job("summarize")))
    data = json.loads(to_json(snap))
    assert data["jobs"][0]["precisions"] == ["bf16", "int4"]
    assert from_json(to_json(snap), ClusterSnapshot) == snap
    del data["jobs"][0]["precisions"]  # written before the field existed
    assert from_data(data, ClusterSnapshot).jobs[0].precisions == DEFAULT_PRECISIONS


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (["int8"], "jobs[0].precisions: must be a non-empty list of bf16, fp8, int4, got ('int8',"),
        ("bf16", "jobs[0].precisions: must be a non-empty list of bf16, fp8, int4, got 'bf16'"),
        ([], "jobs[0].precisions: must be a non-empty list"),
    ],
)
def test_bad_precisions_in_json_name_the_path(value: Any, fragment: str) -> None:
    data = to_data(SNAP)
    data["jobs"][0]["precisions"] = value
    with pytest.raises(InvalidInput) as info:
        from_data(data, ClusterSnapshot)
    assert fragment in str(info.value)


@given(kt.jobs())
def test_strategy_jobs_round_trip_with_their_precisions(job: Job) -> None:
    assert job.precisions
    assert from_json(to_json(job), Job) == job


@given(kt.snapshots(min_jobs=1))
def test_strategy_snapshots_run_only_what_their_jobs_accept(snap: ClusterSnapshot) -> None:
    for active in snap.active:
        assert snap.job(active.job_id).precision_problem(active.ladder) is None


@given(kt.jobs(precisions=kt.precision_sets().filter(lambda p: Quant.INT4 not in p)))
def test_jobs_strategy_takes_a_precision_strategy(job: Job) -> None:
    assert not job.accepts(Quant.INT4)
