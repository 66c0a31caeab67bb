"""Slow replicas: what per-replica telemetry shows, and the plans that recycle them."""

from __future__ import annotations

import attrs
import pytest

from koi.errors import InvalidInput
from koi.testing.fakes import example_pools
from koi.types import (
    ActionKind,
    Chain,
    Config,
    JobAction,
    Ladder,
    Mediators,
    Observation,
    Outcomes,
    Plan,
    Rank,
)

POOL = example_pools()[0]
ENV = POOL.environment
CHAIN = Chain("Llama-3.1-8B", ENV, Config())
OTHER = Chain("Llama-3.1-8B", ENV, Config(max_batch_size=64))


def _obs(tpots: tuple[float, ...], *, job: str = "chat", chain: Chain = CHAIN) -> Observation:
    return Observation(
        job_id=job,
        chain=chain,
        start_s=0.0,
        end_s=300.0,
        requests=100,
        completed=100,
        replicas_up=len(tpots),
        outcomes=Outcomes(1.0, 500.0, 30.0, 1000.0, 0.2),
        mediators=Mediators(0.5, 8.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.3, 0.5),
        replica_tpot_ms={f"r{k}": t for k, t in enumerate(tpots)},
    )


@pytest.mark.parametrize(
    ("tpots", "slow"),
    [
        ((), ""),
        ((30.0,), ""),  # nothing to compare with
        ((10.0, 12.0), ""),
        ((10.0, 14.0), "r1"),  # of two, the faster sets the norm
        ((10.0, 10.5, 11.0, 10.2), ""),
        ((10.0, 10.5, 25.0, 11.0), "r2"),
        ((10.0, 10.5, 25.0, 11.0, 30.0), "r2 r4"),
        ((10.0, 30.0, 31.0), ""),  # the majority sets the norm: one replica runs fast
    ],
)
def test_slow_replicas_are_those_far_above_their_siblings(
    tpots: tuple[float, ...], slow: str
) -> None:
    assert _obs(tpots).slow_replicas(1.3) == frozenset(slow.split())


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"a": -1.0}, "finite number >= 0"),
        ({"a": float("inf")}, "finite number >= 0"),
        ({"a": float("nan")}, "finite number >= 0"),
        ({"a": True}, "finite number >= 0"),
        ({"": 1.0}, "unique name"),
        ([("a", 1.0), ("a", 2.0)], "unique name"),
        ([("a", 1.0, 2.0)], "a \\(name, value\\) pair"),
    ],
)
def test_per_replica_tpots_are_named_finite_and_non_negative(given: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        attrs.evolve(_obs(()), replica_tpot_ms=given)


def test_a_recycle_names_replicas_of_a_kept_or_changed_job() -> None:
    ladder = Ladder((Rank(CHAIN, 2),))
    JobAction("chat", ActionKind.KEEP, ladder, recycle=("r1",))
    with pytest.raises(InvalidInput, match="duplicate id 'r1'"):
        JobAction("chat", ActionKind.RECONFIGURE, ladder, recycle=("r1", "r1"))
    with pytest.raises(InvalidInput, match=r"recycle\[0\]: must be a replica's name"):
        JobAction("chat", ActionKind.KEEP, ladder, recycle=("",))
    with pytest.raises(InvalidInput, match="place action recycles no replica"):
        JobAction("chat", ActionKind.PLACE, ladder, recycle=("r1",))


def test_a_plan_recycles_replicas_slow_two_windows_running_on_chains_kept() -> None:
    three = Ladder((Rank(CHAIN, 3),))
    plan = Plan(
        0.0,
        [
            JobAction("chat", ActionKind.KEEP, three),
            JobAction("grown", ActionKind.RECONFIGURE, Ladder((Rank(CHAIN, 4),))),
            JobAction("shrunk", ActionKind.RECONFIGURE, Ladder((Rank(CHAIN, 2),))),
            JobAction("moved", ActionKind.RECONFIGURE, Ladder((Rank(OTHER, 3),))),
            JobAction("stopped", ActionKind.STOP),
            JobAction("burst", ActionKind.KEEP, three),
        ],
    )
    slow = (10.0, 10.0, 40.0)
    jobs = ("chat", "grown", "shrunk", "moved", "stopped")
    now = [_obs(slow, job=j) for j in (*jobs, "burst")]
    before = [_obs(slow, job=j) for j in jobs] + [_obs((40.0, 10.0, 10.0), job="burst")]
    pools = [attrs.evolve(POOL, capacity_instances=10)]
    recycled = {a.job_id: a.recycle for a in plan.recycling(now, before, 1.3, pools).actions}
    assert recycled == {
        "chat": ("r2",),
        "grown": ("r2",),
        "shrunk": (),  # a scale-in drops the slow replica first
        "moved": (),  # the slow replica leaves with its chain
        "stopped": (),
        "burst": (),  # slow once each: a burst of long prompts, not a bad replica
    }
    assert all(not a.recycle for a in plan.recycling(now, (), 1.3, pools).actions)
    # Two 8-GPU instances: room for one fresh replica beside the plan's 15 GPUs, for the first
    # job that asks.
    tight = [attrs.evolve(POOL, capacity_instances=2)]
    assert [a.recycle for a in plan.recycling(now, before, 1.3, tight).actions if a.recycle] == [
        ("r2",)
    ]
