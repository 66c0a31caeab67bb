"""Planner tick time on a scenario (default hetero-3h; fleet-xl for 10,000 GPUs), no LLM; JSON.

The planner is driven through the simulated fleet so every tick sees realistic snapshots and
telemetry.  The planner runs in a process of its own (as it would beside a real fleet), so
what is reported is its own: the cold first tick, the median and p95 of the rest, the jobs and
GPUs per snapshot, the stage medians, and its peak RSS (``planner_peak_rss_mib``; the
simulator's process, which holds the world, is ``world_peak_rss_mib``).  The simulator's time
and the snapshots' trip through the pipe are outside the tick times.

The machine may be shared, so a fixed reference workload (pure Python and numpy, the same
every time) is timed right after each tick; its median says how fast the machine was during
this run, and ``median_tick_in_reference_units`` compares runs made under different loads.
Targets: hetero-3h median ≤ 0.5 s (DESIGN §12); fleet-xl median ≤ 3 s, p95 ≤ 6 s, the
planner's peak RSS ≤ 3 GiB on 2 cores.

    python benchmarks/tick.py [--scenario hetero-3h|fleet-xl] [--seed 0] [--ticks N]
                              [--set planner.review_every=1 ...] [--default-collector]

``--ticks N`` plans only the first N ticks (a shorter run: jobs arriving later are absent).
``--set KNOB=VALUE`` sets a ``KoiConfig`` knob by its dotted path (the value read as JSON, so
the same code can be timed under two settings).
``--default-collector`` keeps CPython's collector thresholds; by default the run is timed
inside :func:`koi.collector.relaxed_collector`, as koi's own runs are (docs/scale.md).
``median_tick_cpu_s`` is the same median in CPU seconds of the planner's process, steadier
than wall time on a shared machine.  ``unchanged_retick_s`` times one more tick on the last
snapshot with no new telemetry: what a tick costs when nothing changed (the planner takes every
candidate's evaluation and the corrections in force from its memos then, but still re-proposes
every job and solves the selection again).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import resource
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from multiprocessing.connection import Connection
from typing import Any, cast

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
    "fleet-xl": {"median_tick_s": 3.0, "p95_tick_s": 6.0, "planner_peak_rss_mib": 3 * 1024},
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


@attrs.frozen
class TickRecord:
    """One tick as the planner's process saw it."""

    wall_s: float
    cpu_s: float
    reference_s: float
    stages: dict[str, float]
    jobs: int


def _serve_planner(conn: Connection, config: KoiConfig, relaxed: bool) -> None:
    """The planner's process: plans each snapshot sent, replans the last one with no new
    telemetry when asked (``retick``), and reports its peak RSS at ``close``."""
    planner = Planner(config=config)
    last: ClusterSnapshot | None = None
    try:
        with relaxed_collector() if relaxed else nullcontext():
            while True:
                kind, snapshot, observations = conn.recv()
                if kind == "close":
                    conn.send(_peak_rss_mib())
                    return
                if kind == "retick":
                    snapshot, observations = last, ()
                assert snapshot is not None
                start, cpu = time.perf_counter(), time.process_time()
                result = planner.tick(snapshot, observations)
                wall, cpu_s = time.perf_counter() - start, time.process_time() - cpu
                stages, jobs = dict(result.timings_s), len(snapshot.jobs)
                conn.send(
                    (result.plan, TickRecord(wall, cpu_s, reference_workload(), stages, jobs))
                )
                last = snapshot
    except (EOFError, ConnectionError):  # the simulator's process is gone
        return


class PlannerProcess:
    """The koi planner as a sim policy, run in a process of its own: each tick's wall and CPU
    time, stages, size and a reference timing taken right after it are the planner's, and so
    is the peak RSS (the world's memory stays in this process, as it would stay on a real
    fleet; the snapshots and observations travel by pipe, outside the timed tick)."""

    name = "koi"

    def __init__(self, config: KoiConfig, *, relaxed: bool) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_serve_planner, args=(child, config, relaxed), daemon=True
        )
        self._process.start()
        child.close()
        self.ticks: list[TickRecord] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        self._conn.send(("tick", snapshot, tuple(observations)))
        plan, record = self._conn.recv()
        self.ticks.append(record)
        return cast(Plan, plan)

    def retick(self) -> float:
        """Seconds to plan the last snapshot again with no new telemetry: the work a tick
        does when nothing changed (the floor that work growing with change would remove)."""
        self._conn.send(("retick", None, ()))
        return cast(TickRecord, self._conn.recv()[1]).wall_s

    def close(self) -> float:
        """Stop the planner's process; its peak RSS in MiB."""
        self._conn.send(("close", None, ()))
        peak = cast(float, self._conn.recv())
        self._process.join()
        return peak


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
    policy = PlannerProcess(with_knobs(KoiConfig(), knobs), relaxed=not args.default_collector)
    collector = nullcontext() if args.default_collector else relaxed_collector()
    with collector:
        wall0 = time.perf_counter()
        run(sc, policy, seed=args.seed)
        wall = time.perf_counter() - wall0
    unchanged = policy.retick()
    planner_rss = policy.close()
    ticks = policy.ticks
    warm_ticks = ticks[1:] or ticks
    warm = [t.wall_s for t in warm_ticks]
    warm_cpu = [t.cpu_s for t in warm_ticks]
    ref = statistics.median(t.reference_s for t in ticks)
    stages = sorted({k for t in ticks for k in t.stages})
    out: dict[str, Any] = {
        "scenario": sc.name,
        "seed": args.seed,
        "knobs": knobs,
        "collector": "default" if args.default_collector else "relaxed",
        "ticks": len(ticks),
        "gpus": gpus,
        "jobs_per_snapshot": {
            "median": statistics.median(t.jobs for t in ticks),
            "max": max(t.jobs for t in ticks),
        },
        "first_tick_s": round(ticks[0].wall_s, 3),
        "median_tick_s": round(statistics.median(warm), 3),
        "p95_tick_s": round(_p95(warm), 3),
        "max_tick_s": round(max(warm), 3),
        "unchanged_retick_s": round(unchanged, 3),
        "planner_peak_rss_mib": round(planner_rss, 1),
        "world_peak_rss_mib": round(_peak_rss_mib(), 1),
        "reference_median_s": round(ref, 4),
        "median_tick_in_reference_units": round(statistics.median(warm) / ref, 1),
        # CPU seconds of this process (the solver may add a thread): on a shared machine the
        # steadier figure for comparing code, not what a user waits for.
        "median_tick_cpu_s": round(statistics.median(warm_cpu), 3),
        "p95_tick_cpu_s": round(_p95(warm_cpu), 3),
        "run_wall_s": round(wall, 1),
        "median_stage_s": {
            k: round(statistics.median(t.stages.get(k, 0.0) for t in warm_ticks), 3) for k in stages
        },
    }
    targets = TARGETS.get(sc.name)
    if targets is not None:
        out["targets"] = targets
        out["meets_targets"] = all(out[k] <= v for k, v in targets.items())
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
