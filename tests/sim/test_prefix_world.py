"""Prefix caching in the world: scenarios declare prefix profiles, the replay caches them, and
the observed hit rate reaches the planner and moves its corrections (issue 23)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import koi.sim._scenario as scenario_module
from koi.errors import InvalidInput
from koi.planner import Planner
from koi.planner._corrections import correction_fn
from koi.sim import build_world, load_scenario, parse_scenario
from koi.types import (
    ActionKind,
    Chain,
    Config,
    JobAction,
    Ladder,
    Mediator,
    Observation,
    Plan,
    Rank,
)

BUILTIN = Path(scenario_module.__file__).parent / "scenarios"


def _scenario(extra: str) -> str:
    return f"""
[scenario]
name = "prefix"
duration_min = 30
tick_s = 300
[[pools]]
cloud = "onprem"
region = "lab"
market = "reserved"
instance_type = "box"
instances = 2
gpu = "L40S"
gpus_per_instance = 1
price_usd_per_h = 1.0
[[jobs]]
id = "rag"
model = "Llama-3.1-8B"
class = "online"
input = {{ mean = 3000, cv = 0.5, max = 12000 }}
output = {{ mean = 150, cv = 0.5, max = 1024 }}
rate_rps = 3
p99_ttft_ms = 2000
p99_tpot_ms = 80
{extra}
"""


def test_scenarios_take_a_prefix_profile() -> None:
    job = parse_scenario(_scenario("prefix_tokens = 2000\nprefixes = 12")).jobs[0]
    assert (job.workload.shared_prefix_tokens, job.workload.prefix_count) == (2000, 12)
    plain = parse_scenario(_scenario("")).jobs[0]
    assert (plain.workload.shared_prefix_tokens, plain.workload.prefix_count) == (0, 1)
    share = parse_scenario(_scenario("prefix_share = 0.5")).jobs[0]
    assert share.workload.shared_prefix_tokens == 1500
    with pytest.raises(InvalidInput, match=r"jobs\[0\].*prefix_tokens: must be < the longest"):
        parse_scenario(_scenario("prefix_tokens = 12000"))
    with pytest.raises(InvalidInput, match=r"jobs\[0\]\.prefixes: must be"):
        parse_scenario(_scenario("prefix_tokens = 100\nprefixes = 0"))


@pytest.mark.parametrize("path", sorted(BUILTIN.glob("*.toml")), ids=lambda p: p.stem)
def test_builtin_chat_rag_and_agent_jobs_declare_prefix_profiles(path: Path) -> None:
    raw = {j["id"]: j for j in tomllib.loads(path.read_text(encoding="utf-8"))["jobs"]}
    jobs = {j.id: j for j in load_scenario(path.stem).jobs}
    for job_id in raw:
        kind = job_id.split("-")[0]
        shared = jobs[job_id].workload.shared_prefix_tokens
        if kind in ("chat", "rag", "agent"):
            assert shared > 0, f"{path.name}: {job_id} has no prefix profile"
            assert shared < jobs[job_id].workload.input_len.mean
        elif kind in ("summ", "translate", "code", "eval"):
            assert shared == 0, f"{path.name}: {job_id} shares no prompt prefix"


def _serve(world: object, routing: str, ticks: int) -> tuple[list[Observation], Ladder]:
    """Place the job on both boxes with ``routing`` and serve ``ticks`` windows."""
    out: list[Observation] = []
    ladder = Ladder()
    for k in range(ticks):
        world.begin_tick(k, k * 300.0)  # type: ignore[attr-defined]
        if k == 0:
            env = world.snapshot().pools[0].environment  # type: ignore[attr-defined]
            ladder = Ladder((Rank(Chain("Llama-3.1-8B", env, Config(routing=routing)), 2),))
            plan = Plan(0.0, [JobAction("rag", ActionKind.PLACE, ladder)])
            assert world.apply(plan).places == 1  # type: ignore[attr-defined]
        obs, _ = world.serve((k + 1) * 300.0)  # type: ignore[attr-defined]
        out.extend(obs)
    return out, ladder


def test_the_world_caches_prefixes_and_telemetry_carries_the_hit_rate() -> None:
    sc = parse_scenario(_scenario("prefix_tokens = 2000\nprefixes = 12"))
    shared, _ = _serve(build_world(sc, seed=0), "prefix_affinity", 3)
    bare, _ = _serve(build_world(parse_scenario(_scenario("")), seed=0), "prefix_affinity", 3)
    rates = [o.measured(Mediator.PREFIX_HIT_RATE) for o in shared if o.requests]
    assert rates
    assert all(r is not None and 0.3 < r < 2000 / 3000 for r in rates)
    assert all(o.mediators.prefix_hit_rate == 0.0 for o in bare)
    ttft = sum(o.outcomes.p99_ttft_ms for o in shared[1:]) / len(shared[1:])
    ttft_bare = sum(o.outcomes.p99_ttft_ms for o in bare[1:]) / len(bare[1:])
    assert ttft < ttft_bare


def test_the_observed_hit_rate_moves_the_planners_corrections() -> None:
    # Many prefixes on a tight cache under round robin: the world's LRU, with its prefixes
    # unevenly popular, does not hit as the surrogate's uniform model predicts.
    sc = parse_scenario(_scenario("prefix_tokens = 2000\nprefixes = 200"))
    world = build_world(sc, seed=0)
    planner = Planner()
    obs, ladder = _serve(world, "round_robin", 2)
    job = sc.jobs[0]
    before = planner.surrogate.predict(job, ladder).mediators.prefix_hit_rate
    seen = list(obs)
    for k in range(2, 6):
        world.begin_tick(k, k * 300.0)
        planner.tick(world.snapshot(), obs, launch=False)
        obs, _ = world.serve((k + 1) * 300.0)
        seen.extend(obs)
    observed = [o.measured(Mediator.PREFIX_HIT_RATE) for o in seen if o.requests]
    assert observed
    assert all(r is not None for r in observed)
    correct = correction_fn(
        planner.state, job, gpus=planner.gpus, models=planner.models, cfg=planner.config
    )
    factor = correct(ladder.ranks[0].chain).mediator(Mediator.PREFIX_HIT_RATE)
    assert factor != 1.0
    after = planner.surrogate.predict(job, ladder, corrections=correct).mediators.prefix_hit_rate
    mean_observed = sum(r for r in observed if r is not None) / len(observed)
    # The corrected prediction moved toward what the world showed.
    assert abs(after - mean_observed) < abs(before - mean_observed)
