"""Run planners over seeds of one scenario on an executor (processes or Dask), collect results."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, TextIO

import attrs

from koi.bench._executor import ExecutorSpec, open_executor
from koi.collector import relaxed_collector
from koi.errors import InvalidInput
from koi.sim import Scenario, SimConfig

__all__ = [
    "DEVELOPMENT_SEEDS",
    "EVERY_REQUEST",
    "HELD_OUT_SEED_START",
    "MAX_SEEDS",
    "METRICS",
    "BenchResult",
    "RunTask",
    "aggregate",
    "check_jobs",
    "check_planners",
    "execute",
    "replay_requests_of",
    "run_bench",
    "run_one",
    "run_tasks",
    "world_config",
]

#: A ``replay_requests`` above any window's requests: the world replays every request.
EVERY_REQUEST = 1 << 40

#: The seeds koi was developed against; results on them are not evidence.
DEVELOPMENT_SEEDS: tuple[int, ...] = (0, 1, 2)
#: The first held-out seed: seeds from here on are used only to report.
HELD_OUT_SEED_START = 3

#: Metrics reported per planner in ``results.json`` (means over seeds, plus per-seed values).
METRICS: tuple[str, ...] = (
    "composite",
    "quality",
    "coverage",
    "efficiency",
    "goodput_tok_s",
    "cost_per_slo_token_usd",
    "online_admission",
    "batch_admission",
    "batch_progress",
    "ttft_attainment",
    "tpot_attainment",
    "deadline_attainment",
    "swaps",
    "keeps",
    "rejected_actions",
    "plan_time_median_s",
    "plan_time_p95_s",
)


@attrs.frozen
class RunTask:
    """One run: ``planner`` on ``scenario`` with ``seed``, its :class:`~koi.config.KoiConfig`
    overridden by ``knobs`` (dotted paths, see :func:`koi.config.with_knobs`; koi's planners
    only).

    The scenario travels loaded, so a worker on another machine needs no scenario file.
    ``keep_trace`` returns the full trace under ``"trace"``; ``verbose`` prints a line per
    tick to the worker's stderr.  ``replay_requests`` sets how many requests of a job's window
    the world replays before it samples (:class:`~koi.sim.SamplingConfig`'s
    ``max_requests_per_window``; ``None``: the world's default).
    """

    scenario: Scenario
    planner: str
    seed: int
    knobs: tuple[tuple[str, Any], ...] = ()
    keep_trace: bool = False
    verbose: bool = False
    replay_requests: int | None = None


def execute(task: RunTask) -> dict[str, Any]:
    """Run one :class:`RunTask`: metrics, time series and calibration records (JSON-ready).

    A module-level function so that worker processes (local or Dask) can run it.
    """
    from koi.baselines import REFERENCE, make_policy
    from koi.catalog import load_catalog
    from koi.config import KoiConfig, with_knobs
    from koi.sim import build_world, run

    catalog = load_catalog()
    cfg = world_config(task.replay_requests)
    world = (
        build_world(task.scenario, seed=task.seed, cfg=cfg) if task.planner in REFERENCE else None
    )
    config = with_knobs(KoiConfig(), dict(task.knobs)) if task.knobs else None
    policy = make_policy(task.planner, catalog=catalog, seed=task.seed, world=world, config=config)
    progress = sys.stderr if task.verbose else None
    with relaxed_collector():  # a run is a long loop of this process's own (koi.collector)
        result = run(task.scenario, policy, seed=task.seed, progress=progress, cfg=cfg)
    record = result.to_dict()
    record["planner"] = task.planner
    calibration = getattr(policy, "calibration", None)
    record["calibration"] = list(calibration) if calibration is not None else None
    if task.keep_trace:
        record["trace"] = result.to_dict(with_trace=True)["trace"]
    return record


def replay_requests_of(value: object) -> int:
    """A ``replay_requests`` setting as written by a user: ``"all"`` (:data:`EVERY_REQUEST`) or
    a count >= 1."""
    if value == "all":
        return EVERY_REQUEST
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise InvalidInput(f"expected a count >= 1 or 'all', got {value!r}")


def world_config(replay_requests: int | None) -> SimConfig:
    """The simulated world's configuration replaying up to ``replay_requests`` requests of a
    job's window before sampling it (the default world for ``None``)."""
    cfg = SimConfig()
    if replay_requests is None:
        return cfg
    if replay_requests < 1:
        raise InvalidInput(f"replay-requests: must be >= 1, got {replay_requests}")
    sampling = attrs.evolve(cfg.sampling, max_requests_per_window=replay_requests)
    return attrs.evolve(cfg, sampling=sampling)


def _write_trace(out_dir: Path, record: dict[str, Any]) -> None:
    """Move ``record``'s full trace to ``out_dir/traces/<planner>-seed<seed>.json``."""
    traces = out_dir / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    full = {k: v for k, v in record.items() if k not in ("planner", "calibration", "trace")}
    full["trace"] = record.pop("trace")
    full["calibration"] = record["calibration"]
    path = traces / f"{record['planner']}-seed{record['seed']}.json"
    path.write_text(json.dumps(full, default=str))


def run_one(
    scenario: str | Path | Scenario,
    planner: str,
    seed: int,
    out_dir: str | Path | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """One planner, one seed: metrics, time series and calibration records (JSON-ready).

    With ``out_dir``, the full trace goes to ``out_dir/traces/<planner>-seed<seed>.json``.
    """
    from koi.sim import load_scenario

    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    task = RunTask(sc, planner, seed, keep_trace=out_dir is not None, verbose=verbose)
    record = execute(task)
    if out_dir is not None:
        _write_trace(Path(out_dir), record)
    return record


def check_jobs(jobs: int | None) -> None:
    """``jobs`` is a worker count (``None``: the CPU count)."""
    if jobs is not None and jobs < 1:
        raise InvalidInput(f"jobs: must be >= 1, got {jobs}")


def run_tasks(
    tasks: Sequence[RunTask],
    *,
    executor: ExecutorSpec | None = None,
    jobs: int | None = None,
    done: Callable[[RunTask, dict[str, Any]], None] | None = None,
    worker: Callable[[RunTask], dict[str, Any]] = execute,
) -> list[dict[str, Any]]:
    """Run ``tasks`` on ``executor`` (default: a process pool of ``jobs`` workers, the CPU
    count by default) and return their records in task order.

    Tasks are submitted in order (put the slowest first); ``done`` is called in this process
    as each finishes.  A run that raises fails the whole call with its exception.
    """
    check_jobs(jobs)
    spec = executor or ExecutorSpec()
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    records: list[dict[str, Any] | None] = [None] * len(tasks)
    if not tasks:
        return []
    with open_executor(spec, min(workers, len(tasks))) as pool:
        futures = {pool.submit(worker, t): k for k, t in enumerate(tasks)}
        for fut in as_completed(futures):
            k = futures[fut]
            record = fut.result()
            records[k] = record
            if done is not None:
                done(tasks[k], record)
    return [r for r in records if r is not None]


@attrs.frozen
class BenchResult:
    """Every run of a benchmark and its per-planner summary (see :func:`aggregate`)."""

    scenario: str
    seeds: tuple[int, ...]
    planners: tuple[str, ...]
    runs: tuple[Mapping[str, Any], ...]
    summary: Mapping[str, Mapping[str, Any]]
    wall_s: float
    replay_requests: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seeds": list(self.seeds),
            "planners": dict(self.summary),
            "wall_s": self.wall_s,
            "replay_requests": self.replay_requests,
        }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def aggregate(
    runs: Sequence[Mapping[str, Any]], planners: Sequence[str], *, key: str = "planner"
) -> dict[str, Any]:
    """Per planner: the mean and spread (sample standard deviation; 0 for one seed) of every
    metric in :data:`METRICS` over its seeds, and the per-seed values.

    Runs are grouped by their ``key`` field (a sweep groups by its row label, a planner with
    its knobs); ``planners`` lists the groups in table order.  A non-finite value (a cost per
    SLO token with no SLO token) makes the mean ``None``.
    """
    from koi.baselines import REFERENCE, STOCHASTIC

    out: dict[str, Any] = {}
    for name in planners:
        mine = sorted((r for r in runs if r[key] == name), key=lambda r: r["seed"])
        if not mine:
            continue
        planner = mine[0]["planner"]
        entry: dict[str, Any] = {
            "seeds": [r["seed"] for r in mine],
            "stochastic": planner in STOCHASTIC,
            "reference": planner in REFERENCE,
            "wall_s": sum(r["wall_s"] for r in mine),
        }
        spread: dict[str, float | None] = {}
        for metric in METRICS:
            vals = [r["metrics"][metric] for r in mine]
            if any(v is None or not math.isfinite(v) for v in vals):
                entry[metric], spread[metric] = None, None
                continue
            mean = sum(vals) / len(vals)
            var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else 0.0
            entry[metric] = mean
            spread[metric] = math.sqrt(var)
        entry["spread"] = spread
        entry["per_seed"] = [
            {"seed": r["seed"], **{m: r["metrics"][m] for m in METRICS}} for r in mine
        ]
        out[name] = entry
    return out


#: The most seeds one bench or sweep runs: far more than any comparison needs (each is a run
#: of every planner), and a typo such as 10**16 would otherwise exhaust memory listing them.
MAX_SEEDS = 10_000


def check_planners(planners: Sequence[str], where: str = "--planners") -> None:
    """:class:`InvalidInput` naming ``where`` unless every planner is a runnable built-in."""
    from koi.baselines import EXTRA_PLANNERS, LLM_PLANNERS, PLANNERS

    known = (*PLANNERS, *EXTRA_PLANNERS)
    if not planners:
        raise InvalidInput(f"{where}: no planner given; choose from {list(known)}")
    seen: set[str] = set()
    for p in planners:
        if p in seen:  # two rows of one planner would read as two planners
            raise InvalidInput(f"{where}: {p!r} is given twice")
        seen.add(p)
        if p in LLM_PLANNERS:
            raise InvalidInput(f"{where}: {p!r} needs an LLM plugin, none is configured")
        if p not in known:
            raise InvalidInput(f"{where}: unknown planner {p!r}; choose from {list(known)}")


def run_bench(
    scenario: str | Path,
    planners: Sequence[str],
    *,
    seeds: int = 3,
    seed_start: int = 0,
    jobs: int | None = None,
    executor: ExecutorSpec | None = None,
    out_dir: str | Path | None = None,
    progress: TextIO | None = None,
    verbose: bool = False,
    worker: Callable[[RunTask], dict[str, Any]] = execute,
    replay_requests: int | None = None,
) -> BenchResult:
    """Run every planner on seeds ``seed_start .. seed_start + seeds - 1`` of ``scenario``.

    Seeds 0–2 are the development seeds (koi was tuned against them); the seeds from
    :data:`HELD_OUT_SEED_START` on are held out, for reporting only.

    Runs go to ``executor`` (default: a pool of ``jobs`` worker processes, the CPU count by
    default; 1 runs in this process; see :func:`koi.bench.parse_executor` for Dask), the
    slowest planners (koi and its ablations) first.  ``progress`` gets a line per finished
    run, after a first line naming the bench once its inputs are checked (a bad one raises
    :class:`~koi.errors.InvalidInput` before anything is printed or written); ``out_dir``
    receives the traces (written by this process, whatever ran them).  Every
    planner runs every seed: the seed also draws the world (hardware truth, traffic, faults),
    so a deterministic planner's spread is the world's.  ``replay_requests`` is the world's
    sampling (:class:`RunTask`): more is closer to replaying every request, and slower.
    """
    if not 1 <= seeds <= MAX_SEEDS:
        raise InvalidInput(f"seeds: must be in [1, {MAX_SEEDS}], got {seeds}")
    if seed_start < 0:
        raise InvalidInput(f"seed-start: must be >= 0, got {seed_start}")
    check_jobs(jobs)
    check_planners(planners)
    world_config(replay_requests)  # fail early on a bad value
    from koi.baselines import REFERENCE
    from koi.sim import load_scenario

    sc = load_scenario(scenario)  # fail early on a bad scenario
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)  # an unwritable place fails before any run
    if progress is not None:
        print(
            f"koi bench: {sc.name}, {len(planners)} planner(s) x {seeds} seed(s) "
            f"from seed {seed_start} on {executor or ExecutorSpec()}",
            file=progress,
            flush=True,
        )
    seed_list = tuple(range(seed_start, seed_start + seeds))
    pairs = [(p, s) for p in planners for s in seed_list]
    pairs.sort(key=lambda t: ("koi" not in t[0], t[0] not in REFERENCE))
    tasks = [
        RunTask(
            sc,
            p,
            s,
            keep_trace=out is not None,
            verbose=verbose,
            replay_requests=replay_requests,
        )
        for p, s in pairs
    ]
    t0 = time.perf_counter()
    finished = 0

    def done(_task: RunTask, rec: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        if out is not None:
            _write_trace(out, rec)
        if progress is not None:
            m = rec["metrics"]
            print(
                f"[bench {finished}/{len(tasks)}] {rec['planner']} seed={rec['seed']} "
                f"composite={m['composite']:.1f} goodput={m['goodput_tok_s']:.0f} tok/s "
                f"wall={rec['wall_s']:.1f}s (elapsed {time.perf_counter() - t0:.0f}s)",
                file=progress,
                flush=True,
            )

    runs = run_tasks(tasks, executor=executor, jobs=jobs, done=done, worker=worker)
    runs.sort(key=lambda r: (list(planners).index(r["planner"]), r["seed"]))
    return BenchResult(
        scenario=sc.name,
        seeds=seed_list,
        planners=tuple(planners),
        runs=tuple(runs),
        summary=aggregate(runs, planners),
        wall_s=time.perf_counter() - t0,
        replay_requests=replay_requests,
    )
