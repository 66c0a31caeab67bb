"""The precision policy end to end: scenarios declare it, the simulated host enforces it, and
no planner commits a precision a job's owner did not list."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

import koi.sim._scenario as scenario_module
from koi.baselines import PLANNERS, REFERENCE, make_policy
from koi.catalog import Catalog
from koi.cli import main
from koi.errors import InvalidInput
from koi.sim import Scenario, build_world, greedy_first_fit, load_scenario, parse_scenario, run
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    JobAction,
    Ladder,
    Observation,
    Plan,
    Quant,
    Rank,
)

BUILTIN = Path(scenario_module.__file__).parent / "scenarios"

# Narrow sets that each rule out what the planners pick when everything is allowed.
NARROW = {
    "chat-8b": ["bf16"],
    "mod-1b": ["int4"],
    "agent-30b": ["fp8"],
    "batch-qwen8b": ["bf16", "int4"],
}


def _narrowed() -> Scenario:
    sc = load_scenario("smoke")
    jobs = tuple(attrs.evolve(j, precisions=NARROW[j.id]) for j in sc.jobs)
    return attrs.evolve(sc, jobs=jobs)


@attrs.define
class Recorder:
    """Passes a planner's plans through, keeping every ladder it commits to run."""

    inner: object
    committed: list[tuple[str, Ladder]] = attrs.field(factory=list)
    violations: list[str] = attrs.field(factory=list)

    @property
    def name(self) -> str:
        return str(self.inner.name)  # type: ignore[attr-defined]

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        plan: Plan = self.inner.decide(snapshot, observations)  # type: ignore[attr-defined]
        for a in plan.actions:
            if a.kind in (ActionKind.PLACE, ActionKind.RECONFIGURE, ActionKind.KEEP):
                self.committed.append((a.job_id, a.ladder))
                problem = snapshot.job(a.job_id).precision_problem(a.ladder)
                if problem is not None:
                    self.violations.append(f"t={snapshot.time_s:.0f} {a.job_id}: {problem}")
        return plan


@pytest.mark.parametrize("name", PLANNERS)
def test_no_planner_commits_a_precision_outside_the_job_set(name: str, catalog: Catalog) -> None:
    sc = _narrowed()
    world = build_world(sc, seed=0) if name in REFERENCE else None
    recorder = Recorder(make_policy(name, catalog=catalog, seed=0, world=world))
    result = run(sc, recorder, seed=0)  # type: ignore[arg-type]
    assert recorder.violations == []
    assert not [r for r in result.trace.ticks for r in r.rejected if "precision" in r]
    # The planner did place work, within the narrowed sets.
    quants = {
        (job, r.chain.config.quant.value) for job, lad in recorder.committed for r in lad.ranks
    }
    assert quants
    assert all(q in NARROW[job] for job, q in quants)


def test_the_recorder_catches_a_planner_that_ignores_the_policy() -> None:
    # The check above can fail: a planner placing INT4 regardless is caught.
    class Int4Everywhere:
        name = "int4-everywhere"

        def decide(self, snapshot: ClusterSnapshot, observations: object) -> Plan:
            pool = snapshot.pools[0]
            actions = [
                JobAction(
                    j.id,
                    ActionKind.PLACE,
                    Ladder((Rank(Chain(j.model, pool.environment, Config(quant="int4")), 1),)),
                )
                for j in snapshot.pending
            ]
            return Plan(snapshot.time_s, actions)

    recorder = Recorder(Int4Everywhere())
    result = run(_narrowed(), recorder, seed=0)  # type: ignore[arg-type]
    assert any("chat-8b: precision policy" in v for v in recorder.violations)
    # ... and the simulated host refused those launches, naming the policy.
    rejected = [r for t in result.trace.ticks for r in t.rejected]
    assert any("chat-8b: place rejected: infeasible (C2): precision policy" in r for r in rejected)


def test_world_rejects_a_ladder_the_job_does_not_accept() -> None:
    world = build_world(_narrowed(), seed=0)
    world.begin_tick(0, 900.0)
    snap = world.snapshot()
    chat = snap.job("chat-8b")
    l4 = next(p for p in snap.pools if p.environment.gpu == "L4")

    def place(quant: str) -> Plan:
        ladder = Ladder((Rank(Chain(chat.model, l4.environment, Config(quant=quant)), 1),))
        return Plan(snap.time_s, [JobAction(chat.id, ActionKind.PLACE, ladder)])

    refused = world.apply(place("fp8"))
    assert refused.places == 0
    (reason,) = refused.rejected
    assert reason == (
        "chat-8b: place rejected: infeasible (C2): precision policy: ranks[0]: fp8 is outside "
        "the accepted precisions (bf16) of job chat-8b"
    )
    assert world.apply(place("bf16")).places == 1


def test_first_fit_places_only_accepted_precisions(catalog: Catalog) -> None:
    world = build_world(_narrowed(), seed=0)
    world.begin_tick(0, 900.0)
    snap = world.snapshot()
    plan = greedy_first_fit(catalog.gpus, catalog.models).decide(snap, ())
    placed = [a for a in plan.actions if a.kind is ActionKind.PLACE]
    assert placed
    for a in placed:
        assert snap.job(a.job_id).precision_problem(a.ladder) is None


def _one_job(extra: str = "") -> str:
    return f"""
[scenario]
name = "one"
duration_min = 10
[[pools]]
cloud = "onprem"
region = "lab"
market = "reserved"
instance_type = "box"
instances = 1
gpu = "L4"
gpus_per_instance = 1
price_usd_per_h = 0.5
[[jobs]]
id = "chat"
model = "Llama-3.1-8B"
class = "online"
input = {{ mean = 500 }}
output = {{ mean = 100 }}
rate_rps = 1
p99_ttft_ms = 1000
p99_tpot_ms = 60
{extra}
"""


def test_koi_scenarios_lists_each_job_precisions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["smoke"]["precisions"] == {
        "chat-8b": ["bf16", "fp8"],
        "mod-1b": ["bf16", "fp8", "int4"],
        "agent-30b": ["bf16", "fp8"],
        "batch-qwen8b": ["bf16", "fp8", "int4"],
    }


def test_scenario_toml_takes_precisions() -> None:
    sc = parse_scenario(_one_job('precisions = ["int4", "bf16"]'))
    assert sc.jobs[0].precisions == (Quant.BF16, Quant.INT4)
    assert parse_scenario(_one_job()).jobs[0].precisions == (Quant.BF16, Quant.FP8)
    with pytest.raises(InvalidInput, match=r"jobs\[0\]\.precisions: must be a non-empty list"):
        parse_scenario(_one_job('precisions = ["int8"]'))
    with pytest.raises(InvalidInput, match=r"jobs\[0\]\.precisions: .* got 'bf16'"):
        parse_scenario(_one_job('precisions = "bf16"'))


@pytest.mark.parametrize("path", sorted(BUILTIN.glob("*.toml")), ids=lambda p: p.stem)
def test_builtin_scenarios_declare_precisions_job_by_job(path: Path) -> None:
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    for job in raw["jobs"]:
        assert "precisions" in job, f"{path.name}: job {job['id']} declares no precisions"
    by_id = {j.id: j for j in load_scenario(path.stem).jobs}
    int4 = {job_id for job_id, j in by_id.items() if Quant.INT4 in j.precisions}
    # Premium chat, code and reasoning keep BF16/FP8; moderation and bulk labelling take INT4.
    assert not {"chat-8b", "chat-70b", "code-mistral", "reason-235b"} & int4
    assert {"mod-fast", "label-mixtral", "mod-1b"} & set(by_id) <= int4
    assert all(Quant.BF16 in j.precisions for j in by_id.values())
