"""The simulated fleet as a koi host plugin: snapshot, telemetry and launch hooks.

A planner driven through plugins (``koi_snapshot`` → ``koi_collect_telemetry`` →
``koi_launch``) talks to the simulated fleet exactly as it would to a real host::

    host = SimFleetHost(build_world("smoke", seed=0))
    pm = make_plugin_manager(plugins=[host], entry_points=False)
    for tick in range(host.ticks):
        host.begin()            # events, arrivals, hazards due at this tick
        planner.tick(...)       # calls the three hooks through koi.plugins.PluginHost
        host.finish()           # simulate the window until the next tick
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from koi.plugins import hookimpl
from koi.sim._trace import JobWindow
from koi.sim._world import ApplyResult, World
from koi.types import ClusterSnapshot, LaunchResult, Observation, Plan, Rank

__all__ = ["SimFleetHost", "observations_for"]


class SimFleetHost:
    """Hook implementations backed by a :class:`~koi.sim.World`.

    ``koi_snapshot`` answers with the world at its current tick (whatever ``now`` the caller
    passes: the simulation owns the clock); ``koi_collect_telemetry`` returns the observations
    of the last simulated window for the ranks asked about; ``koi_launch`` applies the plan
    after the world's safety checks and returns what materialized.
    """

    def __init__(self, world: World) -> None:
        self.world = world
        self.index = 0
        self.observations: tuple[Observation, ...] = ()
        self.windows: tuple[JobWindow, ...] = ()
        self.last_apply: ApplyResult | None = None
        self.notes: list[str] = []

    @property
    def ticks(self) -> int:
        return self.world.scenario.ticks

    @property
    def window(self) -> tuple[float, float]:
        """The window the current observations cover."""
        tick = self.world.scenario.tick_s
        return max(0.0, self.world.now - tick), max(self.world.now, tick)

    def begin(self) -> ClusterSnapshot:
        """Move the world to the next tick (events, arrivals, hazards) and return its snapshot."""
        sc = self.world.scenario
        self.notes = self.world.begin_tick(self.index, self.index * sc.tick_s)
        self.last_apply = None
        return self.world.snapshot()

    def finish(self) -> None:
        """Simulate the window from this tick to the next; keep its telemetry."""
        sc = self.world.scenario
        end = min((self.index + 1) * sc.tick_s, sc.duration_s)
        self.notes += self.world.preempt_unannounced()
        obs, windows = self.world.serve(end)
        self.observations, self.windows = tuple(obs), tuple(windows)
        self.index += 1

    @hookimpl
    def koi_snapshot(self, now: float) -> ClusterSnapshot | None:
        del now
        return self.world.snapshot()

    @hookimpl
    def koi_collect_telemetry(
        self, ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
    ) -> Iterable[Observation]:
        return observations_for(self.observations, ranks, window)

    @hookimpl
    def koi_launch(self, plan: Plan) -> Iterable[LaunchResult]:
        self.last_apply = self.world.apply(plan)
        return self.last_apply.launches


def observations_for(
    observations: Iterable[Observation],
    ranks: Sequence[tuple[str, Rank]],
    window: tuple[float, float],
) -> list[Observation]:
    """The observations of ``ranks`` that lie inside ``window``: what a telemetry hook over
    the simulated fleet answers."""
    wanted = {(job_id, rank.chain) for job_id, rank in ranks}
    start, end = window
    return [
        o
        for o in observations
        if (o.job_id, o.chain) in wanted and o.start_s >= start and o.end_s <= end
    ]
