"""CPU cost of benchmark runs — the demo's unit of work — per planner, with a profile; JSON.

``koi bench`` (and so ``make demo``) is planners × seeds runs of one scenario; this times
single runs exactly as the bench executes them (``koi.bench.RunTask``), optionally on the
scenario's first ``--hours`` (jobs and events after that are dropped), and reports per planner
the run's CPU and wall seconds.  The machine may be shared: a fixed reference workload (the
one ``benchmarks/tick.py`` uses) is timed before and after each run, and ``cpu_in_reference_units``
compares runs made under different loads.  With ``--profile`` the run is made under cProfile
(slower) and the cumulative seconds of the main stages are reported as shares of the run:

* ``replay`` — the surrogate's replays of candidate ladders (``replay_open_loop`` and
  ``replay_closed_loop``);
* ``replay_step_cache_nodes`` — step-model probes of the step-time caches (the surrogate's
  replays and the simulated fleet's engines);
* ``closed_form_all`` — the closed-form estimates (screens, sizing, and the one inside every
  replay);
* ``simulator`` — the simulated fleet serving its windows;
* ``selector`` — the joint MILP.

The stages overlap (a closed-form estimate runs inside every replay); each share is of the
profiled run's total (cProfile's clock, wall time).

    python benchmarks/run_cost.py --planners feedback-milp,koi [--scenario hetero-3h]
        [--seed 0] [--hours 1] [--profile] [--knob corrections.hysteresis=0.15 ...]

``--knob`` sets a :class:`koi.config.KoiConfig` knob for koi's planners (as ``koi sweep`` does;
the value is read as JSON, else kept as a string).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from typing import Any

import attrs

from koi.baselines import CONFIGURABLE
from koi.bench import RunTask, execute
from koi.sim import Scenario, load_scenario
from tick import knob, reference_workload

#: Stage name -> functions (file suffix, function name) whose cumulative time it is.
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "replay": (
        ("_replay_adapter.py", "replay_open_loop"),
        ("_replay_adapter.py", "replay_closed_loop"),
    ),
    "replay_step_cache_nodes": (("replay/_cache.py", "_node"),),
    "closed_form_all": (
        ("_analytic.py", "estimate_open_loop"),
        ("_analytic.py", "estimate_closed_loop"),
    ),
    "simulator": (("sim/_serve.py", "serve"),),
    "selector": (("selector/_select.py", "select"),),
}


def truncated(sc: Scenario, hours: float) -> Scenario:
    """``sc`` cut to its first ``hours`` (jobs arriving and events after it dropped)."""
    if hours <= 0 or hours * 3600.0 >= sc.duration_s:
        return sc
    end = hours * 3600.0
    return attrs.evolve(
        sc,
        duration_s=end,
        jobs=[j for j in sc.jobs if j.arrival_s < end],
        events=[e for e in sc.events if e.at_s < end],
    )


def _stage_seconds(stats: pstats.Stats) -> dict[str, float]:
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for stage, funcs in STAGES.items():
        total = 0.0
        for (path, _, name), (_, _, _, cum, _) in table.items():
            if any(path.endswith(suffix) and name == fn for suffix, fn in funcs):
                total += cum
        out[stage] = total
    return out


def measure(task: RunTask, profile: bool) -> dict[str, Any]:
    before = [reference_workload() for _ in range(3)]
    prof = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    record = execute(task)
    if prof is not None:
        prof.disable()
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    after = [reference_workload() for _ in range(3)]
    ref = statistics.median(before + after)
    out: dict[str, Any] = {
        "planner": task.planner,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "reference_s": round(ref, 4),
        "cpu_in_reference_units": round(cpu / ref, 1),
        "composite": record["metrics"]["composite"],
    }
    if prof is not None:
        stats = pstats.Stats(prof)
        total = max(stats.total_tt, 1e-9)  # type: ignore[attr-defined]
        out["profiled_s"] = round(total, 2)
        out["shares"] = {k: round(v / total, 3) for k, v in _stage_seconds(stats).items()}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--planners", default="feedback-milp,koi")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hours", type=float, default=0.0, help="first N hours only (0: all)")
    ap.add_argument("--profile", action="store_true", help="run under cProfile, report shares")
    ap.add_argument("--knob", action="append", default=[], help="PATH=VALUE for koi's planners")
    args = ap.parse_args(argv)
    sc = truncated(load_scenario(args.scenario), args.hours)
    knobs = tuple(knob(k, "--knob") for k in args.knob)
    runs = [
        measure(
            RunTask(sc, name.strip(), args.seed, knobs if name.strip() in CONFIGURABLE else ()),
            args.profile,
        )
        for name in args.planners.split(",")
        if name.strip()
    ]
    report = {
        "scenario": args.scenario,
        "hours": sc.duration_s / 3600.0,
        "seed": args.seed,
        "profiled": args.profile,
        "knobs": dict(knobs),
        "runs": runs,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
