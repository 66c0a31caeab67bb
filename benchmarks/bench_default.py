"""The whole default benchmark: wall time and peak memory of ``koi bench`` (DESIGN §12).

Prints JSON.  ``python benchmarks/bench_default.py [--scenario hetero-3h] [--seeds 3]
[--jobs N] [--planners a,b,...]``.  Targets: the default bench (hetero-3h, every non-LLM
planner, 3 seeds) in <= 10 min wall on 2 cores, peak memory <= 2 GiB per process; koi's median
planning time per tick is reported too (target <= 0.5 s).  For a quick check use
``--scenario smoke``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from koi.baselines import DEFAULT_PLANNERS
from koi.bench import run_bench


def _peak_rss_mib(who: int) -> float:
    scale = 1024.0 if sys.platform != "darwin" else 1024.0 * 1024.0
    return resource.getrusage(who).ru_maxrss / scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="hetero-3h")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--planners", default=",".join(DEFAULT_PLANNERS))
    args = parser.parse_args()
    planners = [p for p in args.planners.split(",") if p]
    t0 = time.perf_counter()
    result = run_bench(args.scenario, planners, seeds=args.seeds, jobs=args.jobs)
    wall = time.perf_counter() - t0
    koi = result.summary.get("koi", {})
    out = {
        "scenario": result.scenario,
        "seeds": args.seeds,
        "planners": planners,
        "wall_s": round(wall, 1),
        "target_wall_s": 600,
        "peak_rss_mib": round(
            max(_peak_rss_mib(resource.RUSAGE_SELF), _peak_rss_mib(resource.RUSAGE_CHILDREN)), 1
        ),
        "koi_plan_time_median_s": koi.get("plan_time_median_s"),
        "composite": {name: entry.get("composite") for name, entry in result.summary.items()},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
