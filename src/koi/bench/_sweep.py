"""A sweep: the grid of scenarios × planners × seeds × ``KoiConfig`` knob settings.

A sweep file is TOML::

    [sweep]
    scenarios = ["smoke", "hetero-3h"]   # built-in names or scenario TOML paths
    planners = ["koi", "rolling-milp"]
    seeds = 3                            # seeds 0..2; or a list, e.g. [3, 4, 5]
    replay_requests = "all"              # optional: the world's sampling (koi bench's flag)

    [knobs]                              # each knob's list of values; the grid is their product
    "planner.tau" = [0.2, 0.3]
    planner.search_rounds = [1, 2]       # a dotted key is the same knob

A knob is a dotted path into :class:`koi.config.KoiConfig`; a value that is not a list is a
single setting (write a list of lists for a tuple-valued knob).  Only koi's planners read the
knobs (:data:`koi.baselines.CONFIGURABLE`): every other planner runs once per scenario and
seed, with no knobs.  ``replay_requests`` (a count >= 1, or ``"all"``) is how many requests of
a job's window the world replays before it samples, for every run of the sweep, as
``koi bench --replay-requests``; without it, the default world.
"""

from __future__ import annotations

import itertools
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from koi.bench._executor import ExecutorSpec
from koi.bench._runner import (
    MAX_SEEDS,
    METRICS,
    RunTask,
    aggregate,
    check_jobs,
    check_planners,
    execute,
    replay_requests_of,
    run_tasks,
)
from koi.errors import InvalidInput, read_text

__all__ = ["Sweep", "SweepResult", "load_sweep", "parse_sweep", "run_sweep", "sweep_line"]

_SWEEP_KEYS = ("scenarios", "planners", "seeds", "replay_requests")
#: Knobs the bench overrides (koi.baselines.koi_config): refused rather than silently ignored.
_WALL_CLOCK_KNOBS = frozenset(
    {"selector.time_limit_s", "planner.proposer_timeout_s", "planner.tick_deadline_s"}
)

Knobs = tuple[tuple[str, Any], ...]


@attrs.frozen
class Sweep:
    """A parsed sweep file (see the module docstring); ``knobs`` maps each knob's dotted path
    to the values it takes, in file order; ``replay_requests`` is the world's sampling for
    every run (``None``: the default world)."""

    scenarios: tuple[str, ...]
    planners: tuple[str, ...]
    seeds: tuple[int, ...]
    knobs: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    replay_requests: int | None = None

    def settings(self) -> list[Knobs]:
        """Every knob setting of the grid (one empty setting when the sweep has no knobs)."""
        paths = [path for path, _ in self.knobs]
        return [
            tuple(zip(paths, values, strict=True))
            for values in itertools.product(*(vals for _, vals in self.knobs))
        ]

    def cells(self) -> list[tuple[str, str, int, Knobs]]:
        """Every (scenario, planner, seed, knobs) of the grid: scenario, then planner as
        listed, then knob setting, then seed."""
        from koi.baselines import CONFIGURABLE

        return [
            (sc, p, seed, knobs)
            for sc in self.scenarios
            for p in self.planners
            for knobs in (self.settings() if p in CONFIGURABLE else [()])
            for seed in self.seeds
        ]


def label(planner: str, knobs: Knobs) -> str:
    """A sweep row's name: the planner and its knob setting (``koi planner.tau=0.2``)."""
    return " ".join([planner, *(f"{path}={value!r}" for path, value in knobs)])


def _flatten(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Dotted TOML keys and sub-tables (``{"planner": {"tau": x}}``) as dotted paths."""
    out: list[tuple[str, Any]] = []
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, f"{path}.")
        else:
            out.append((path, value))
    return out


def _seeds(value: object, source: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_SEEDS:
            raise InvalidInput(f"{source}: sweep.seeds: must be in [1, {MAX_SEEDS}], got {value}")
        return tuple(range(value))
    if (
        isinstance(value, list)
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
    ):
        if len(set(value)) != len(value):
            raise InvalidInput(f"{source}: sweep.seeds: repeats a seed: {value}")
        return tuple(value)
    msg = f"{source}: sweep.seeds: expected a count >= 1 or a list of seeds >= 0, got {value!r}"
    raise InvalidInput(msg)


def _replay_requests(value: object, source: str) -> int | None:
    if value is None:
        return None
    try:
        return replay_requests_of(value)
    except InvalidInput as exc:
        raise InvalidInput(f"{source}: sweep.replay_requests: {exc}") from None


def _names(doc: Mapping[str, Any], key: str, source: str) -> tuple[str, ...]:
    value = doc.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{source}: sweep.{key}: expected a non-empty list of names")
    if len(set(value)) != len(value):
        raise InvalidInput(f"{source}: sweep.{key}: repeats a name: {value}")
    return tuple(value)


def parse_sweep(text: str, *, source: str = "<sweep>") -> Sweep:
    """A :class:`Sweep` from TOML text; every error names ``source`` and the key.

    Planners and knob values are checked here, so a bad grid fails before any run starts;
    scenarios are loaded by :func:`run_sweep`.
    """
    from koi.config import KoiConfig, with_knobs

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"{source}: TOML nested too deeply") from None
    unknown = sorted(set(doc) - {"sweep", "knobs"})
    if unknown:
        raise InvalidInput(f"{source}: unknown table(s) {unknown}; expected [sweep] and [knobs]")
    head = doc.get("sweep")
    if not isinstance(head, dict):
        raise InvalidInput(f"{source}: missing the [sweep] table")
    extra = sorted(set(head) - set(_SWEEP_KEYS))
    if extra:
        raise InvalidInput(f"{source}: sweep: unknown key(s) {extra}; expected {_SWEEP_KEYS}")
    planners = _names(head, "planners", source)
    check_planners(planners, where=f"{source}: sweep.planners")
    knobs: list[tuple[str, tuple[Any, ...]]] = []
    for path, value in _flatten(doc.get("knobs", {})):
        if any(path == known for known, _ in knobs):  # "planner.tau" and [knobs.planner] tau
            raise InvalidInput(f"{source}: knobs.{path}: given twice")
        if path in _WALL_CLOCK_KNOBS:
            raise InvalidInput(
                f"{source}: knobs.{path}: koi bench runs without wall-clock limits (a run must "
                "not depend on how fast the machine is), so this knob would have no effect"
            )
        values = tuple(value) if isinstance(value, list) else (value,)
        if not values:
            raise InvalidInput(f"{source}: knobs.{path}: an empty list sets nothing")
        for v in values:
            try:
                with_knobs(KoiConfig(), {path: v})
            except InvalidInput as exc:
                raise InvalidInput(f"{source}: knobs: {exc}") from None
        knobs.append((path, values))
    return Sweep(
        scenarios=_names(head, "scenarios", source),
        planners=planners,
        seeds=_seeds(head.get("seeds", 1), source),
        knobs=tuple(knobs),
        replay_requests=_replay_requests(head.get("replay_requests"), source),
    )


def load_sweep(path: str | Path) -> Sweep:
    """:func:`parse_sweep` of a file."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInput(f"sweep: no file {str(p)!r}")
    return parse_sweep(read_text(p), source=str(p))


@attrs.frozen
class SweepResult:
    """Every run of a sweep (records in grid order, each with its ``knobs`` and ``label``) and
    per scenario the summary of :func:`koi.bench.aggregate` by row label."""

    sweep: Sweep
    runs: tuple[Mapping[str, Any], ...]
    summaries: Mapping[str, Mapping[str, Mapping[str, Any]]]
    wall_s: float


def sweep_line(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run's JSON line: what ran, its wall time and its metrics (no series, no trace)."""
    return {
        "scenario": record["scenario"],
        "planner": record["planner"],
        "knobs": dict(record["knobs"]),
        "label": record["label"],
        "seed": record["seed"],
        "wall_s": record["wall_s"],
        "metrics": {m: record["metrics"][m] for m in METRICS},
    }


def run_sweep(
    sweep: Sweep,
    *,
    executor: ExecutorSpec | None = None,
    jobs: int | None = None,
    on_run: Callable[[Mapping[str, Any]], None] | None = None,
    worker: Callable[[RunTask], dict[str, Any]] = execute,
    started: Callable[[], None] | None = None,
) -> SweepResult:
    """Run every cell of ``sweep`` on ``executor`` (see :func:`koi.bench.run_tasks`), the
    slowest planners first; ``on_run`` gets each finished run's record (with ``knobs`` and
    ``label``) as it comes.  The result lists the runs in grid order.

    ``started`` is called once the scenarios are loaded and ``jobs`` is checked, before the
    first run: a caller that writes as runs finish opens its files there, so a bad input
    raises :class:`~koi.errors.InvalidInput` with nothing written."""
    from koi.baselines import CONFIGURABLE, REFERENCE
    from koi.sim import load_scenario

    check_jobs(jobs)
    loaded = {name: load_scenario(name) for name in sweep.scenarios}
    names = [sc.name for sc in loaded.values()]
    if len(set(names)) != len(names):
        raise InvalidInput(f"sweep.scenarios: two scenarios share a name: {names}")
    if started is not None:
        started()
    cells = sweep.cells()
    # The slowest planners (koi's, then the references) go first, so the last runs are short.
    order = sorted(
        range(len(cells)),
        key=lambda k: (cells[k][1] not in CONFIGURABLE, cells[k][1] not in REFERENCE),
    )
    tasks = [
        RunTask(loaded[sc], p, seed, knobs=knobs, replay_requests=sweep.replay_requests)
        for sc, p, seed, knobs in (cells[k] for k in order)
    ]
    t0 = time.perf_counter()

    def tag(task: RunTask, record: dict[str, Any]) -> None:
        record["knobs"] = dict(task.knobs)
        record["label"] = label(task.planner, task.knobs)
        if on_run is not None:
            on_run(record)

    done = run_tasks(tasks, executor=executor, jobs=jobs, done=tag, worker=worker)
    runs: list[dict[str, Any]] = [{}] * len(cells)
    for k, record in zip(order, done, strict=True):
        runs[k] = record
    summaries: dict[str, Mapping[str, Mapping[str, Any]]] = {}
    for name in names:
        mine = [r for r in runs if r["scenario"] == name]
        labels = list(dict.fromkeys(r["label"] for r in mine))
        summaries[name] = aggregate(mine, labels, key="label")
    return SweepResult(
        sweep=sweep, runs=tuple(runs), summaries=summaries, wall_s=time.perf_counter() - t0
    )
