"""The planner's cross-tick memos (screens, sizings, predictions, cost references, exercised
edges) only save work: a planner that carried them through a changing fleet plans every tick
exactly as a fresh planner given the same state plans it from scratch."""

from __future__ import annotations

from collections.abc import Sequence

from koi.planner import Planner
from koi.sim import load_scenario, run
from koi.types import ActionKind, ClusterSnapshot, Observation, Plan


class _Twin:
    """Runs the warm planner, and before each of its ticks a cold copy of its state."""

    name = "koi"

    def __init__(self) -> None:
        self.warm = Planner()
        self.pairs: list[tuple[Plan, Plan]] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        cold = Planner()
        cold.state = self.warm.state
        # The observed rates outlive a tick (a job may miss a window's telemetry).
        cold._observed_rates = dict(self.warm._observed_rates)
        from_scratch = cold.tick(snapshot, observations).plan
        incremental = self.warm.tick(snapshot, observations).plan
        self.pairs.append((incremental, from_scratch))
        return incremental


def test_incremental_ticks_plan_as_from_scratch_on_a_changing_fleet() -> None:
    # smoke: jobs arrive and finish, a pool shrinks, spot preemptions, a traffic surge.
    sc = load_scenario("smoke")
    assert len({e.kind for e in sc.events}) >= 2
    twin = _Twin()
    run(sc, twin, seed=1)
    assert len(twin.pairs) == sc.ticks
    changed = 0
    for k, (incremental, from_scratch) in enumerate(twin.pairs):
        assert incremental == from_scratch, f"tick {k}"
        changed += any(a.kind is not ActionKind.KEEP for a in incremental.actions)
    # The comparison means something: the fleet changed under the planner more than once,
    # and the warm planner answered from its cross-tick memos.
    assert changed >= 2
    assert twin.warm.surrogate.hits > 0
