"""The simulated fleet as the fleet of ``koi agent``: a host plugin that advances with the agent.

:class:`koi.sim.SimFleetHost` is driven by a runner that calls ``begin()`` and ``finish()``
around each tick.  Under ``koi agent`` nobody does: this plugin advances the world itself, one
scenario tick (``tick_s`` simulated seconds, 300 by default) per agent tick.  ``koi_snapshot``
first simulates the window since the previous snapshot (its telemetry is then what
``koi_collect_telemetry`` returns), then opens the next tick.  Past the scenario's end the fleet
keeps serving its jobs with no further events, so the agent can run as long as it is left on.

With ``state`` set, the world is saved (pickled, to a file only this plugin writes) after every
snapshot and launch, so a restarted agent finds the fleet as it left it, as a real fleet would
be.  The file is trusted input: point ``state`` only at a file this plugin wrote.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from koi.errors import InvalidInput, StateError
from koi.plugins import hookimpl
from koi.sim import World, build_world, observations_for
from koi.types import ClusterSnapshot, LaunchResult, Observation, Plan, Rank

__all__ = ["SimulatedFleet"]

_FORMAT = 1


class SimulatedFleet:
    """``koi_snapshot``, ``koi_collect_telemetry`` and ``koi_launch`` over a simulated world.

    Parameters
    ----------
    scenario
        A built-in scenario name (``koi scenarios``) or the path of a scenario file.
    seed
        The world's seed.
    state
        Where to keep the world between agent runs (``None``: start afresh every run).

    .. versionadded:: 0.1
    """

    koi_plugin_name = "koi.simulated_fleet"

    def __init__(self, scenario: str = "smoke", *, seed: int = 0, state: str | None = None) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidInput(f"seed: must be an integer >= 0, got {seed!r}")
        if not isinstance(scenario, str) or not scenario:
            raise InvalidInput(f"scenario: must be a scenario name or path, got {scenario!r}")
        self.state_path = Path(state) if state else None
        self.world: World
        self.index = 0  # the scenario tick that is open (or next to open)
        self.open = False
        self.observations: tuple[Observation, ...] = ()
        if self.state_path is not None and self.state_path.exists():
            self._load(self.state_path, scenario, seed)
        else:
            self.world = build_world(scenario, seed=seed)
            self.scenario, self.seed = scenario, seed

    # -- persistence --------------------------------------------------------------------------

    def _load(self, path: Path, scenario: str, seed: int) -> None:
        try:
            with path.open("rb") as fh:
                data = pickle.load(fh)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise StateError(f"{path}: cannot read the simulated fleet ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise StateError(f"{path}: not a simulated-fleet state file")
        if (data["scenario"], data["seed"]) != (scenario, seed):
            msg = (
                f"{path}: holds scenario {data['scenario']!r} seed {data['seed']}, not "
                f"{scenario!r} seed {seed}; remove it to start afresh"
            )
            raise StateError(msg)
        self.world = data["world"]
        self.index, self.open = data["index"], data["open"]
        self.observations = data["observations"]
        self.scenario, self.seed = scenario, seed

    def _save(self) -> None:
        if self.state_path is None:
            return
        data = {
            "format": _FORMAT,
            "scenario": self.scenario,
            "seed": self.seed,
            "world": self.world,
            "index": self.index,
            "open": self.open,
            "observations": self.observations,
        }
        directory = self.state_path.parent
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.state_path.name}.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
                fh.flush()
                os.fsync(fh.fileno())
            Path(tmp).replace(self.state_path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                Path(tmp).unlink()
            raise

    # -- the clock ----------------------------------------------------------------------------

    @property
    def tick_s(self) -> float:
        return float(self.world.scenario.tick_s)

    def _advance(self) -> None:
        """Close the open tick (simulate its window), then open the next one."""
        if self.open:
            self.world.preempt_unannounced()
            obs, _ = self.world.serve((self.index + 1) * self.tick_s)
            self.observations = tuple(obs)
            self.index += 1
        self.world.begin_tick(self.index, self.index * self.tick_s)
        self.open = True

    # -- hooks ----------------------------------------------------------------------------------

    @hookimpl
    def koi_snapshot(self, now: float) -> ClusterSnapshot | None:
        del now  # the simulation owns its clock: one scenario tick per agent tick
        self._advance()
        self._save()
        return self.world.snapshot()

    @hookimpl
    def koi_collect_telemetry(
        self, ranks: Sequence[tuple[str, Rank]], window: tuple[float, float]
    ) -> Iterable[Observation]:
        return observations_for(self.observations, ranks, window)

    @hookimpl
    def koi_launch(self, plan: Plan) -> Iterable[LaunchResult]:
        applied = self.world.apply(plan)
        self._save()
        return applied.launches
