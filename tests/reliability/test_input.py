"""Issue items 8, 10 and 11: bad input at the edges is refused with a clear error naming it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from koi.errors import InvalidInput
from koi.planner import Planner
from koi.plugins import LlmConfig
from koi.plugins._llm_schema import SchemaViolation, validate_ladder
from koi.types import (
    ActionKind,
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Engine,
    Ladder,
    Pool,
    Rank,
    from_data,
    to_data,
)
from tests.planner._world import CATALOG, chat_job, pools, unhurried_planner


def _snapshot_data() -> dict[str, Any]:
    pool = pools()[0]
    job = chat_job()
    chain = Chain(job.model, pool.environment, Config())
    snap = ClusterSnapshot(
        0.0, [job], [pool], [ActiveDeployment(job.id, Ladder((Rank(chain, 2),)))]
    )
    data: dict[str, Any] = to_data(snap)
    return data


@pytest.mark.parametrize(
    ("path", "bad", "message"),
    [
        (("active", 0, "ladder", "ranks", 0, "replicas"), 2.999, "must be an integer, got 2.999"),
        (("active", 0, "ladder", "ranks", 0, "replicas"), "2", "must be an integer, got '2'"),
        (("active", 0, "ladder", "ranks", 0, "replicas"), True, "must be an integer, got True"),
        (("pools", 0, "capacity_instances"), 2.5, "must be an integer, got 2.5"),
        (("time_s",), "0", "must be a number, got '0'"),
        (("time_s",), False, "must be a number, got False"),
        (("jobs", 0, "model"), 8, "must be a string, got 8"),
        (("jobs", 0, "priority"), 10**30, "priority: must be an integer in [0, 1000000]"),
        (("active", 0, "ladder", "ranks", 0, "chain", "config", "engine"), "tgi", "engine"),
    ],
)
def test_snapshot_numbers_are_not_coerced(path: tuple[Any, ...], bad: Any, message: str) -> None:
    data = _snapshot_data()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad
    with pytest.raises(InvalidInput) as info:
        from_data(data, ClusterSnapshot)
    assert message in str(info.value)


def test_the_unmodified_snapshot_data_loads() -> None:  # the parametrized cases above can fail
    assert from_data(_snapshot_data(), ClusterSnapshot).active[0].ladder.replicas == 2


def test_engines_are_a_closed_set() -> None:
    assert {e.value for e in Engine} == {"vllm", "sglang", "trtllm"}
    with pytest.raises(InvalidInput, match="engine: must be one of vllm, sglang, trtllm"):
        Config(engine="my-engine")
    assert Config(engine="sglang").engine is Engine.SGLANG
    # Every engine has a step-time profile in the surrogate's table.
    from koi.surrogate import SurrogateConfig

    assert {name for name, _ in SurrogateConfig().engines} >= {e.value for e in Engine}


def test_an_llm_reply_with_an_unknown_engine_is_rejected() -> None:
    rank = {
        "pool": "p",
        "gpu": "H100-SXM",
        "model": "Llama-3.1-8B",
        "replicas": 1,
        "config": {
            "tp": 1,
            "pp": 1,
            "quant": "bf16",
            "max_batch_size": 64,
            "max_batched_tokens": 8192,
            "engine": "tgi",
        },
    }
    with pytest.raises(SchemaViolation, match=r"config\.engine: must be one of vllm"):
        validate_ladder({"ranks": [rank]}, "ladders[0]", LlmConfig())
    rank["config"]["engine"] = "vllm"  # type: ignore[index]
    assert validate_ladder({"ranks": [rank]}, "ladders[0]", LlmConfig())


def test_a_wrong_model_in_an_active_ladder_is_invalid_input() -> None:
    pool = pools()[0]
    job = chat_job()
    other = Chain("Qwen3-8B", pool.environment, Config())
    with pytest.raises(InvalidInput, match=r"active\[0\]\.ladder\.ranks\[0\]\.chain\.model"):
        ClusterSnapshot(0.0, [job], [pool], [ActiveDeployment(job.id, Ladder((Rank(other),)))])


def test_an_active_job_with_an_empty_ladder_is_placed_as_a_pending_one() -> None:
    # A host may list a job that runs nothing (scaled to zero) as active; it was planned as a
    # "reconfiguration" from nothing, with the switching cost of one.
    job, fleet = chat_job(), pools()
    pending = ClusterSnapshot(0.0, [job], fleet)
    empty = ClusterSnapshot(0.0, [job], fleet, [ActiveDeployment(job.id, Ladder())])
    plans = [unhurried_planner().tick(s).plan for s in (pending, empty)]
    (action,) = plans[1].actions
    assert action.kind is ActionKind.PLACE
    assert not action.ladder.is_empty
    assert plans[1].actions == plans[0].actions


def test_an_unknown_gpu_is_invalid_input() -> None:
    pool = pools()[0]
    odd = Pool(attrs.evolve(pool.environment, gpu="TPU-v9"), 2)
    job = chat_job()
    chain = Chain(job.model, odd.environment, Config())
    snap = ClusterSnapshot(0.0, [job], [odd], [ActiveDeployment(job.id, Ladder((Rank(chain),)))])
    planner = Planner(catalog=CATALOG)
    with pytest.raises(InvalidInput, match=r"pools\[0\]\.environment\.gpu: unknown GPU 'TPU-v9'"):
        planner.tick(snap)
    assert planner.state.tick == 0  # refused before any state changed


def test_ten_thousand_jobs_are_refused_at_once_with_the_limit() -> None:
    base = chat_job()
    jobs = [attrs.evolve(base, id=f"j{k}") for k in range(10_000)]
    snap = ClusterSnapshot(0.0, jobs, pools())
    planner = Planner(catalog=CATALOG)
    before = planner.state
    with pytest.raises(InvalidInput, match=r"10000 jobs exceed the limit of 1000 .*max_jobs"):
        planner.tick(snap)
    # Refused at S0, before any stage ran (how long that takes: benchmarks/input_size.py).
    assert planner.state is before


def test_scenarios_need_pools_and_a_tick_of_a_second() -> None:
    import re
    from importlib.resources import files

    from koi.sim import parse_scenario

    text = files("koi.sim").joinpath("scenarios/smoke.toml").read_text(encoding="utf-8")
    assert parse_scenario(text).pools  # the unmodified file is fine
    no_pools = re.sub(r"\[\[pools\]\][^\[]*", "", text)
    assert "[[pools]]" not in no_pools
    with pytest.raises(InvalidInput, match="pools: a scenario needs at least one pool"):
        parse_scenario(no_pools, source="x.toml")
    fast = text.replace("tick_s = 300", "tick_s = 0.01")
    with pytest.raises(InvalidInput, match=r"tick_s: must be >= 1 s, got 0.01"):
        parse_scenario(fast, source="x.toml")
