"""Planner tick time on a scenario (default hetero-3h; fleet-xl for 10,000 GPUs), no LLM; JSON.

The planner is driven through the simulated fleet so every tick sees realistic snapshots and
telemetry.  Reported: the cold first tick, the median and p95 of the rest, the jobs and GPUs per
snapshot, the stage medians, and the process's peak RSS (planner and simulator together).  The
simulator's own time is excluded from the tick times.

The machine may be shared, so a fixed reference workload (pure Python and numpy, the same
every time) is timed right after each tick; its median says how fast the machine was during
this run, and ``median_tick_in_reference_units`` compares runs made under different loads.
Targets: hetero-3h median ≤ 0.5 s (DESIGN §12); fleet-xl median ≤ 3 s, p95 ≤ 6 s, peak RSS
≤ 3 GiB on 2 cores.

    python benchmarks/tick.py [--scenario hetero-3h|fleet-xl] [--seed 0] [--ticks N]
                              [--set planner.review_every=1 ...] [--default-collector]

``--ticks N`` plans only the first N ticks (a shorter run: jobs arriving later are absent).
``--set KNOB=VALUE`` sets a ``KoiConfig`` knob by its dotted path (the value read as JSON, so
the same code can be timed under two settings).
``--default-collector`` keeps CPython's collector thresholds; by default the run is timed
inside :func:`koi.collector.relaxed_collector`, as koi's own runs are (docs/scale.md).
``median_tick_cpu_s`` is the same median in CPU seconds of this process, steadier than wall
time on a shared machine.  ``unchanged_retick_s`` times one more tick on the last snapshot with
no new telemetry: what a tick costs when nothing changed (the planner takes every candidate's
evaluation and the corrections in force from its memos then, but still re-proposes every job
and solves the selection again).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import attrs
import numpy as np

from koi.catalog import load_catalog
from koi.collector import relaxed_collector
from koi.config import KoiConfig, with_knobs
from koi.planner import Planner
from koi.sim import Scenario, load_scenario, resolve_pools, run
from koi.types import ClusterSnapshot, Observation, Plan

TARGETS: dict[str, dict[str, float]] = {
    "hetero-3h": {"median_tick_s": 0.5},
    "fleet-xl": {"median_tick_s": 3.0, "p95_tick_s": 6.0, "peak_rss_mib": 3 * 1024},
}


def reference_workload() -> float:
    """Seconds for a fixed mix of interpreter and numpy work (about 50 ms on an idle core)."""
    start = time.perf_counter()
    total = 0
    for k in range(150_000):
        total += k * k % 7
    a = np.random.default_rng(0).random(200_000)
    np.sort(a)
    np.exp(a).sum()
    return time.perf_counter() - start


class TimedPlanner:
    """The koi planner as a sim policy, recording each tick's wall time, stage timings, size
    and a reference timing taken right after it."""

    name = "koi"

    def __init__(self, config: KoiConfig | None = None) -> None:
        self.planner = Planner(config=config)
        self.seconds: list[float] = []
        self.cpu_seconds: list[float] = []
        self.reference: list[float] = []
        self.stages: list[dict[str, float]] = []
        self.jobs: list[int] = []
        self.last: ClusterSnapshot | None = None

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        start, cpu = time.perf_counter(), time.process_time()
        result = self.planner.tick(snapshot, observations)
        self.seconds.append(time.perf_counter() - start)
        self.cpu_seconds.append(time.process_time() - cpu)
        self.reference.append(reference_workload())
        self.stages.append(dict(result.timings_s))
        self.jobs.append(len(snapshot.jobs))
        self.last = snapshot
        return result.plan

    def retick(self) -> float:
        """Seconds to plan the last snapshot again with no new telemetry: the work a tick
        does when nothing changed (the floor that work growing with change would remove)."""
        assert self.last is not None
        start = time.perf_counter()
        self.planner.tick(self.last, ())
        return time.perf_counter() - start


def truncated(sc: Scenario, ticks: int) -> Scenario:
    """The first ``ticks`` ticks of ``sc`` (jobs and events after the end dropped)."""
    end = min(ticks * sc.tick_s, sc.duration_s)
    return attrs.evolve(
        sc,
        duration_s=end,
        jobs=tuple(j for j in sc.jobs if j.arrival_s < end),
        events=tuple(e for e in sc.events if e.at_s < end),
    )


def _peak_rss_mib() -> float:
    scale = 1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0  # KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def _p95(xs: Sequence[float]) -> float:
    """Nearest rank: the smallest value with at least 95 % of the ticks at or below it."""
    return sorted(xs)[math.ceil(0.95 * len(xs)) - 1]


def knob(text: str, flag: str = "--set") -> tuple[str, Any]:
    """A ``PATH=VALUE`` knob as written after ``flag``: the value read as JSON, else kept as
    a string (for :func:`koi.config.with_knobs`; the benchmark scripts share it).  Anything
    else is a usage error: one line and exit 2, as argparse's own."""
    path, sep, value = text.partition("=")
    if not sep:
        print(f"{flag} {text!r}: expected PATH=VALUE", file=sys.stderr)
        raise SystemExit(2)
    try:
        return path.strip(), json.loads(value)
    except json.JSONDecodeError:
        return path.strip(), value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", default="hetero-3h")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ticks", type=int, default=None, help="plan only the first N ticks")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KNOB=VALUE", help="a KoiConfig knob"
    )
    parser.add_argument(
        "--default-collector",
        action="store_true",
        help="keep CPython's collector thresholds (default: koi.collector's relaxed ones)",
    )
    args = parser.parse_args()
    knobs = dict(knob(s) for s in args.set)
    sc = load_scenario(args.scenario)
    if args.ticks is not None:
        sc = truncated(sc, args.ticks)
    gpus = sum(p.capacity_gpus for p in resolve_pools(sc, tuple(load_catalog().instances)))
    policy = TimedPlanner(with_knobs(KoiConfig(), knobs))
    collector = nullcontext() if args.default_collector else relaxed_collector()
    with collector:
        wall0 = time.perf_counter()
        run(sc, policy, seed=args.seed)
        wall = time.perf_counter() - wall0
        unchanged = policy.retick()
    warm = policy.seconds[1:] or policy.seconds
    warm_cpu = policy.cpu_seconds[1:] or policy.cpu_seconds
    ref = statistics.median(policy.reference)
    stages = sorted({k for s in policy.stages for k in s})
    warm_stages = policy.stages[1:] or policy.stages
    out: dict[str, Any] = {
        "scenario": sc.name,
        "seed": args.seed,
        "knobs": knobs,
        "collector": "default" if args.default_collector else "relaxed",
        "ticks": len(policy.seconds),
        "gpus": gpus,
        "jobs_per_snapshot": {"median": statistics.median(policy.jobs), "max": max(policy.jobs)},
        "first_tick_s": round(policy.seconds[0], 3),
        "median_tick_s": round(statistics.median(warm), 3),
        "p95_tick_s": round(_p95(warm), 3),
        "max_tick_s": round(max(warm), 3),
        "unchanged_retick_s": round(unchanged, 3),
        "peak_rss_mib": round(_peak_rss_mib(), 1),
        "reference_median_s": round(ref, 4),
        "median_tick_in_reference_units": round(statistics.median(warm) / ref, 1),
        # CPU seconds of this process (the solver may add a thread): on a shared machine the
        # steadier figure for comparing code, not what a user waits for.
        "median_tick_cpu_s": round(statistics.median(warm_cpu), 3),
        "p95_tick_cpu_s": round(_p95(warm_cpu), 3),
        "run_wall_s": round(wall, 1),
        "median_stage_s": {
            k: round(statistics.median(s.get(k, 0.0) for s in warm_stages), 3) for k in stages
        },
    }
    targets = TARGETS.get(sc.name)
    if targets is not None:
        out["targets"] = targets
        out["meets_targets"] = all(out[k] <= v for k, v in targets.items())
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
