"""Simulator speed: simulated seconds per wall second on a scenario, and peak memory.

Prints JSON.  ``python benchmarks/sim.py [--scenario hetero-3h] [--seed 0] [--repeats 3]
[--koi] [--world measured|synthetic] [--no-fidelity] [--default-collector]``.
The runs are timed inside :func:`koi.collector.relaxed_collector`, as koi's own runs are
(``--default-collector`` keeps CPython's thresholds; docs/scale.md, "The collector").
The trivial policies (greedy first fit, over-provision) measure the simulator itself; ``--koi``
adds the koi planner (``koi.planner.Planner`` implements the ``koi.sim.Policy`` protocol).  Targets
(DESIGN §12, issue 7): >= 1,000x real time with a trivial policy, <= 60 s wall with koi, peak
memory <= 2 GiB.  The surrogate-versus-truth error of the scenario is reported too, overall and
per GPU type.  On a shared machine wall time measures the neighbours, so simulated seconds per
CPU second are reported next to the wall figure, with the load average before and after.  Each
trivial policy runs ``--repeats`` times (medians reported), alternating with a fixed
pure-Python reference workload timed in the same process: its CPU time says how fast the
machine was while the simulator ran (compare it across runs before comparing their speeds).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import resource
import statistics
import sys
import time
from contextlib import nullcontext
from typing import Any

import attrs

from koi.catalog import load_catalog
from koi.collector import relaxed_collector
from koi.planner import Planner
from koi.sim import (
    Policy,
    Scenario,
    greedy_first_fit,
    load_scenario,
    over_provision,
    run,
    surrogate_error,
)


def _peak_rss_mib() -> float:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    scale = 1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


def _reference_cpu_s() -> float:
    """CPU seconds of a fixed workload shaped like the replay loop (heap, dicts, floats)."""
    cpu0 = time.process_time()
    heap: list[tuple[float, int]] = []
    table: dict[int, float] = {}
    x = 0.5
    for i in range(400_000):
        x = 3.9 * x * (1.0 - x)  # logistic map: stays in (0, 1)
        heapq.heappush(heap, (x, i))
        table[i % 4096] = table.get(i % 4096, 0.0) + x
        if len(heap) > 64:
            heapq.heappop(heap)
    return time.process_time() - cpu0


def _median_runs(
    scenario: Scenario, make: Any, seed: int, repeats: int
) -> tuple[dict[str, Any], list[float]]:
    """``repeats`` runs of a fresh policy, each after a reference; medians of the speeds."""
    runs, refs = [], []
    for _ in range(repeats):
        refs.append(_reference_cpu_s())
        runs.append(_measure(scenario, make(), seed))
    out = dict(runs[-1])
    for key in ("wall_s", "cpu_s", "sim_s_per_wall_s", "sim_s_per_cpu_s"):
        out[key] = statistics.median(r[key] or 0.0 for r in runs)
    out["repeats"] = repeats
    out["cpu_s_each"] = [r["cpu_s"] for r in runs]
    return out, refs


def _measure(scenario: Scenario, policy: Policy, seed: int) -> dict[str, Any]:
    cpu0 = time.process_time()
    result = run(scenario, policy, seed=seed)
    cpu = time.process_time() - cpu0
    m = result.metrics
    return {
        "policy": policy.name,
        "wall_s": round(result.wall_s, 3),
        "cpu_s": round(cpu, 3),
        "sim_s": result.trace.duration_s,
        "sim_s_per_wall_s": round(result.speedup, 1),
        "sim_s_per_cpu_s": round(result.trace.duration_s / cpu, 1) if cpu > 0 else None,
        "goodput_tok_s": round(m.goodput_tok_s, 1),
        "composite": round(m.composite, 2),
        "plan_time_median_s": m.plan_time_median_s,
        "peak_rss_mib_so_far": round(_peak_rss_mib(), 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--koi", action="store_true", help="also time the koi planner")
    ap.add_argument("--no-fidelity", action="store_true", help="skip the surrogate error")
    ap.add_argument("--world", help="override the scenario's world (measured or synthetic)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per trivial policy (median)")
    ap.add_argument(
        "--default-collector",
        action="store_true",
        help="keep CPython's collector thresholds (default: koi.collector's relaxed ones)",
    )
    args = ap.parse_args()
    with nullcontext() if args.default_collector else relaxed_collector():
        return _report(args)


def _report(args: argparse.Namespace) -> int:
    cat = load_catalog()
    scenario = load_scenario(args.scenario)
    if args.world:
        scenario = attrs.evolve(scenario, world=args.world)
    load_before = os.getloadavg()
    refs: list[float] = []
    runs = []
    for make in (
        lambda: greedy_first_fit(cat.gpus, cat.models),
        lambda: over_provision(cat.gpus, cat.models),
    ):
        med, ref = _median_runs(scenario, make, args.seed, max(1, args.repeats))
        runs.append(med)
        refs += ref
    out: dict[str, Any] = {
        "scenario": args.scenario,
        "world": scenario.world,
        "seed": args.seed,
        "collector": "default" if args.default_collector else "relaxed",
        "runs": runs,
        "reference_cpu_s_median": round(statistics.median(refs), 3),
        "reference_cpu_s_each": [round(r, 3) for r in refs],
    }
    if args.koi:
        out["koi"] = _measure(scenario, Planner(), args.seed)  # a koi.sim.Policy
    if not args.no_fidelity:
        err = surrogate_error(scenario, seed=args.seed)
        out["surrogate_vs_truth"] = {
            "median_ape": round(err.median_ape, 4),
            "median_ape_tpot": round(err.median_ape_tpot, 4),
            "median_ape_ttft": round(err.median_ape_ttft, 4),
            "median_ape_capacity": round(err.median_ape_capacity, 4),
            "samples": err.samples,
            "by_gpu": {
                g: {m: round(v, 4) for m, v in row.items()} for g, row in err.by_gpu.items()
            },
            "bias_by_gpu": {g: round(v, 4) for g, v in err.bias_by_gpu.items()},
        }
    out["peak_rss_mib"] = round(_peak_rss_mib(), 1)
    out["target_trivial_sim_s_per_wall_s"] = 1000
    out["meets_trivial_target"] = min(r["sim_s_per_wall_s"] for r in runs) >= 1000
    out["meets_trivial_target_per_cpu_s"] = min(r["sim_s_per_cpu_s"] or 0 for r in runs) >= 1000
    out["cpus"] = os.cpu_count()
    out["load_avg_1m_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
