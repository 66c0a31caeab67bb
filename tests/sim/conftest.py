"""Fixtures for the simulated-fleet tests: catalog maps, tiny scenarios, a fixed-ladder policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs
import pytest

from koi.catalog import Catalog, load_catalog
from koi.sim import Scenario, parse_scenario
from koi.types import (
    ActionKind,
    Chain,
    ClusterSnapshot,
    Config,
    JobAction,
    Ladder,
    Observation,
    Plan,
    Rank,
)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


def pool_toml(
    *,
    instance: str = "box",
    gpu: str = "H100-SXM",
    gpus_per_instance: int = 1,
    instances: int = 4,
    market: str = "on_demand",
    price: float = 4.0,
    preemption: float = 0.0,
) -> str:
    return f"""
[[pools]]
cloud = "lab"
region = "r1"
market = "{market}"
instance_type = "{instance}"
instances = {instances}
gpu = "{gpu}"
gpus_per_instance = {gpus_per_instance}
price_usd_per_h = {price}
preemption_per_h = {preemption}
"""


def online_job_toml(
    *,
    job_id: str = "chat",
    model: str = "Llama-3.1-8B",
    rate: float = 2.0,
    inp: int = 500,
    out: int = 100,
    ttft: float = 1000,
    tpot: float = 60,
    arrival_min: float = 0,
) -> str:
    return f"""
[[jobs]]
id = "{job_id}"
model = "{model}"
class = "online"
arrival_min = {arrival_min}
input = {{ mean = {inp}, cv = 0.3, max = {inp * 4} }}
output = {{ mean = {out}, cv = 0.3, max = {out * 4} }}
rate_rps = {rate}
p99_ttft_ms = {ttft}
p99_tpot_ms = {tpot}
"""


def tiny(body: str, *, minutes: int = 30, name: str = "tiny") -> Scenario:
    return parse_scenario(
        f'[scenario]\nname = "{name}"\nduration_min = {minutes}\ntick_s = 300\n' + body,
        source=name,
    )


@attrs.define
class Fixed:
    """Places a fixed ladder per job (built from the snapshot's pools) and keeps it."""

    build: Callable[[ClusterSnapshot, str], Ladder | None]
    name: str = "fixed"
    seen: list[tuple[ClusterSnapshot, tuple[Observation, ...]]] = attrs.field(factory=list)

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        self.seen.append((snapshot, tuple(observations)))
        current = snapshot.current_ladders
        actions = []
        for job in snapshot.jobs:
            if job.id in current:
                actions.append(JobAction(job.id, ActionKind.KEEP, current[job.id]))
                continue
            ladder = self.build(snapshot, job.id)
            if ladder is None:
                actions.append(JobAction(job.id, ActionKind.DEFER))
            else:
                actions.append(JobAction(job.id, ActionKind.PLACE, ladder))
        return Plan(snapshot.time_s, actions)


def one_rank(
    model: str, *, tp: int = 1, replicas: int = 1, pool: int = 0, **config: object
) -> Callable[[ClusterSnapshot, str], Ladder]:
    def build(snapshot: ClusterSnapshot, job_id: str) -> Ladder:
        del job_id
        env = snapshot.pools[pool].environment
        return Ladder((Rank(Chain(model, env, Config(tp=tp, **config)), replicas),))  # type: ignore[arg-type]

    return build


def by_job(
    ladders: Mapping[str, Callable[[ClusterSnapshot, str], Ladder]],
) -> Callable[[ClusterSnapshot, str], Ladder | None]:
    def build(snapshot: ClusterSnapshot, job_id: str) -> Ladder | None:
        f = ladders.get(job_id)
        return None if f is None else f(snapshot, job_id)

    return build
