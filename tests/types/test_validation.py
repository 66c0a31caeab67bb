"""Invalid values raise InvalidInput naming the field, and nested paths when parsed from data."""

from __future__ import annotations

import json
import math
from typing import Any

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import koi.testing as kt
from koi.errors import InvalidInput, KoiError
from koi.testing.fakes import example_gpus, example_models, example_pools, example_snapshot
from koi.types import (
    ActionKind,
    ClusterSnapshot,
    Config,
    JobAction,
    Ladder,
    LengthDist,
    ObjectiveWeights,
    Observation,
    Plan,
    Quota,
    ServingTarget,
    from_data,
    from_json,
    to_data,
)

SNAP = example_snapshot()
CHAT, BATCH = SNAP.jobs
POOL = example_pools()[0]
GPU = example_gpus()["H100-SXM"]
MODEL = example_models()["Llama-3.1-8B"]

# (base value, field, bad value, message fragment)
CASES: list[tuple[Any, str, Any, str]] = [
    (GPU, "memory_gib", 0.0, "memory_gib: must be > 0"),
    (GPU, "hbm_tb_s", float("nan"), "hbm_tb_s: must be a number, not NaN"),
    (
        GPU,
        "link",
        "carrier-pigeon",
        "link: must be one of nvlink, pcie, pcie_no_p2p, infinity_fabric",
    ),
    (GPU, "gpus_per_node", 0, "gpus_per_node: must be an integer >= 1"),
    (GPU, "name", " H100", "name: must be a non-empty name"),
    (POOL.environment, "market", "black", "market: must be one of on_demand, spot, reserved"),
    (POOL.environment, "price_usd_per_h", -1.0, "price_usd_per_h: must be >= 0"),
    (POOL, "capacity_instances", -1, "capacity_instances: must be an integer in [0, "),
    (POOL, "capacity_instances", 1.5, "capacity_instances: must be an integer in [0, "),
    (MODEL, "active_params_b", 9.0, "active_params_b: must be <= params_b"),
    (MODEL, "kv_heads", 5, "kv_heads: must divide heads"),
    (MODEL, "layers", True, "layers: must be an integer >= 1"),
    (CHAT.workload.input_len, "mean", 2e6, "mean: must be <= max"),
    (CHAT.workload, "prefix_share", 1.5, "prefix_share: must be in [0, 1]"),
    (CHAT.workload, "rate_rps", -2.0, "rate_rps: must be > 0"),
    (CHAT.target, "p99_ttft_ms", -5, "p99_ttft_ms: must be > 0, got -5"),
    (CHAT, "job_class", "interactive", "job_class: must be one of online, batch"),
    (CHAT, "workload", attrs.evolve(CHAT.workload, rate_rps=None), "workload.rate_rps: required"),
    (CHAT, "target", ServingTarget.batch(deadline_s=5.0), "target: an online job needs"),
    (BATCH, "completed_requests", 10**9, "completed_requests: must be <= total_requests"),
    (BATCH, "target", ServingTarget(), "target.deadline_s: required"),
    (Config(), "tp", 0, "tp: must be an integer >= 1"),
    (Config(), "quant", "fp4", "quant: must be one of bf16, fp8, int4"),
    (Config(), "routing", "random", "routing: must be one of"),
    (SNAP.active[0].ladder.ranks[0], "replicas", 0, "replicas: must be an integer >= 1"),
    (SNAP, "time_s", -1.0, "time_s: must be >= 0"),
    (SNAP, "jobs", (CHAT, CHAT), "jobs: duplicate id 'chat'"),
    (SNAP, "pools", (POOL, POOL), "pools: duplicate id"),
    (SNAP, "pools", (POOL,), "active[0].ladder.ranks[0]: unknown pool"),
    (SNAP, "jobs", (BATCH,), "active[0].job_id: unknown job 'chat'"),
    (Quota("team-a", 8), "max_gpus", -1, "max_gpus: must be an integer in [0, "),
    (Quota("team-a", 8), "group", "", "group: must be a non-empty name"),
    (SNAP, "quotas", (Quota("a", 1), Quota("a", 2)), "quotas: duplicate id 'a'"),
]


@pytest.mark.parametrize(("base", "field", "bad", "message"), CASES)
def test_invalid_field_raises_invalid_input(base: Any, field: str, bad: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        attrs.evolve(base, **{field: bad})
    assert message in str(info.value)


def test_invalid_input_is_a_value_error_callers_can_catch_as_such() -> None:
    assert issubclass(InvalidInput, ValueError)
    assert issubclass(InvalidInput, KoiError)


def test_other_invalid_values() -> None:
    with pytest.raises(InvalidInput, match="at least one objective weight"):
        ObjectiveWeights(0, 0, 0, 0, 0)
    with pytest.raises(InvalidInput, match="ladder: action keep needs a non-empty ladder"):
        JobAction("chat", ActionKind.KEEP)
    with pytest.raises(InvalidInput, match="ladder: action defer needs an empty ladder"):
        JobAction("chat", ActionKind.DEFER, SNAP.active[0].ladder)
    with pytest.raises(InvalidInput, match="actions: duplicate id 'x'"):
        Plan(0.0, [JobAction("x", "defer"), JobAction("x", "stop")])
    with pytest.raises(InvalidInput, match="mean: must be > 0"):
        LengthDist(0)


def test_nested_path_is_named() -> None:
    jobs = [attrs.evolve(CHAT, id=f"job{k}") for k in range(5)]
    data = to_data(ClusterSnapshot(0.0, jobs, example_pools()))
    data["jobs"][3]["target"]["p99_ttft_ms"] = -5
    with pytest.raises(InvalidInput, match=r"^jobs\[3\]\.target\.p99_ttft_ms: must be > 0, got -5"):
        from_data(data, ClusterSnapshot)


def test_missing_and_unknown_fields_are_named() -> None:
    data = to_data(SNAP)
    del data["pools"][1]["environment"]["gpu"]
    data["jobs"][0]["colour"] = "blue"
    with pytest.raises(InvalidInput) as info:
        from_data(data, ClusterSnapshot)
    text = str(info.value)
    assert "pools[1].environment.gpu: required field missing" in text
    assert "jobs[0]: unknown field(s) ['colour']" in text


def test_malformed_json_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=r"snapshot\.json: not valid JSON \(line 1"):
        from_json("{jobs: ", ClusterSnapshot, where="snapshot.json")
    # Valid JSON that the interpreter refuses to read (an integer of 5,001 digits).
    with pytest.raises(InvalidInput, match=r"snapshot\.json: not valid JSON"):
        from_json('{"time_s": ' + "9" * 5001 + "}", ClusterSnapshot, where="snapshot.json")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: [d], r"^f: ClusterSnapshot must be an object, got a list$"),
        (lambda d: "snapshot", r"^f: ClusterSnapshot must be an object, got a string$"),
        (lambda d: d | {"pools": {}}, r"^f: pools: must be a list, got an object$"),
        (lambda d: d | {"jobs": "chat"}, r"^f: jobs: must be a list, got a string$"),
        (lambda d: d | {"jobs": [5]}, r"^f: jobs\[0\]: must be an object, got 5$"),
        (lambda d: d | {"pools": [[1]]}, r"^f: pools\[0\]: must be an object, got a list$"),
    ],
)
def test_a_container_of_the_wrong_json_kind_is_named(edit: Any, message: str) -> None:
    # An empty object where a list belongs was read as an empty list, and a list where an
    # object belongs failed inside cattrs with "'list' object has no attribute 'keys'".
    with pytest.raises(InvalidInput, match=message):
        from_data(edit(to_data(SNAP)), ClusterSnapshot, where="f")


def _numeric_leaves(data: Any, path: str = "") -> list[str]:
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _numeric_leaves(v, f"{path}.{k}".lstrip("."))]
    if isinstance(data, list):
        return [p for k, v in enumerate(data) for p in _numeric_leaves(v, f"{path}[{k}]")]
    if isinstance(data, int | float) and not isinstance(data, bool):
        return [path]
    return []


def _set(data: Any, path: str, value: Any) -> None:
    parts = path.replace("[", ".[").split(".")
    node = data
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value


@given(snapshot=kt.snapshots(min_jobs=1), data=st.data())
def test_nan_anywhere_in_a_snapshot_is_named(
    snapshot: ClusterSnapshot, data: st.DataObject
) -> None:
    tree = to_data(snapshot)
    leaves = _numeric_leaves(tree)
    assume(leaves)
    path = data.draw(st.sampled_from(leaves), label="path")
    _set(tree, path, math.nan)
    with pytest.raises(InvalidInput) as info:
        from_data(json.loads(json.dumps(tree)), ClusterSnapshot)
    assert path in str(info.value)


@given(obs=kt.observations(), data=st.data())
def test_negative_telemetry_is_named(obs: Observation, data: st.DataObject) -> None:
    tree = to_data(obs)
    group = data.draw(st.sampled_from(["outcomes", "mediators"]))
    field = data.draw(st.sampled_from(sorted(k for k in tree[group] if k != "slo_margin")))
    tree[group][field] = -1.0
    with pytest.raises(InvalidInput, match=rf"{group}\.{field}: must be"):
        from_data(tree, Observation)


def test_empty_ladder_is_valid_and_round_trips() -> None:
    assert from_data(to_data(Ladder()), Ladder) == Ladder()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: LengthDist(mean=100, cv=1e308), r"cv: must be in \[0, 100\]"),
        (lambda: ObjectiveWeights(ttft=1e308), r"ttft: must be in \[0, 1e\+06\]"),
        (
            lambda: attrs.evolve(next(iter(example_models().values())), params_b=1e308),
            r"params_b: must be in \[0, 100000\]",
        ),
        (
            lambda: attrs.evolve(next(iter(example_gpus().values())), memory_gib=1e308),
            r"memory_gib: must be in \[0, 100000\]",
        ),
        (
            lambda: attrs.evolve(example_snapshot().active[0].ladder.ranks[0], replicas=2**63),
            r"replicas: must be an integer in \[1, 2147483648\]",
        ),
    ],
)
def test_finite_but_absurd_values_are_refused_where_they_enter(build: Any, message: str) -> None:
    """A fuzzing round's cases: each passed the finiteness checks and then overflowed inside a
    tick, which fell back to the safe plan instead of naming the field."""
    with pytest.raises(InvalidInput, match=message):
        build()
