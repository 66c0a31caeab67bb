"""Planner tick time at hetero-3h scale (25 jobs, ~400 GPUs), no LLM; prints JSON.

The planner is driven through the simulated fleet so every tick sees realistic snapshots and
telemetry.  Reported: the cold first tick, and the median and p95 of the rest (DESIGN §12
target: median ≤ 0.5 s on 2 cores).  The simulator's own time is excluded.

    python benchmarks/tick.py [--scenario hetero-3h] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence

from koi.planner import Planner
from koi.sim import run
from koi.types import ClusterSnapshot, Observation, Plan


class TimedPlanner:
    """The koi planner as a sim policy, recording each tick's wall time and stage timings."""

    name = "koi"

    def __init__(self) -> None:
        self.planner = Planner()
        self.seconds: list[float] = []
        self.stages: list[dict[str, float]] = []

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        start = time.perf_counter()
        result = self.planner.tick(snapshot, observations)
        self.seconds.append(time.perf_counter() - start)
        self.stages.append(dict(result.timings_s))
        return result.plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="hetero-3h")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    policy = TimedPlanner()
    run(args.scenario, policy, seed=args.seed)
    warm = policy.seconds[1:] or policy.seconds
    stages = sorted({k for s in policy.stages for k in s})
    print(
        json.dumps(
            {
                "scenario": args.scenario,
                "ticks": len(policy.seconds),
                "first_tick_s": round(policy.seconds[0], 3),
                "median_tick_s": round(statistics.median(warm), 3),
                "p95_tick_s": round(sorted(warm)[int(0.95 * (len(warm) - 1))], 3),
                "median_stage_s": {
                    k: round(statistics.median(s.get(k, 0.0) for s in policy.stages[1:]), 3)
                    for k in stages
                },
                "target_median_s": 0.5,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
