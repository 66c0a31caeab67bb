"""What the simulated telemetry tells the planners about each job's completions, against the
accounting behind the metrics.

    python benchmarks/telemetry_bias.py --scenario hetero-3h --seed 6 [--planner koi]

Runs ``--planner`` through the scenario and prints, per online job, as JSON: the requests its
ranks' observations reported routed and completed over the run (``completed_per_request``,
what every planner reads) and the windows in which a rank reported more completions than
requests, against the accounting's finished over offered requests (``finished_per_offered``,
what the online admission is made of; requests still running at the end count as unfinished
here).  The telemetry replays a sub-window of each window and adds ``(scale − 1)`` times the
change of the running set to the completions (docs/evaluation.md, "Sampled windows"); where
requests live longer than a sub-window the two can part by a factor of two.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Sequence

import attrs

from koi.baselines import REFERENCE, make_policy
from koi.catalog import load_catalog
from koi.sim import Policy, build_world, run
from koi.types import ClusterSnapshot, Observation, Plan


@attrs.define
class _Recorded:
    """``inner`` unchanged, with every observation it is shown summed per job."""

    inner: Policy
    requests: Counter[str] = attrs.field(factory=Counter)
    completed: Counter[str] = attrs.field(factory=Counter)
    over: Counter[str] = attrs.field(factory=Counter)

    @property
    def name(self) -> str:
        return self.inner.name

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        for o in observations:
            self.requests[o.job_id] += o.requests
            self.completed[o.job_id] += o.completed
            self.over[o.job_id] += int(o.completed > o.requests)
        return self.inner.decide(snapshot, observations)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--planner", default="koi")
    args = ap.parse_args()
    # Only the references see the truth, as in ``koi bench``.
    world = build_world(args.scenario, seed=args.seed) if args.planner in REFERENCE else None
    policy = _Recorded(
        make_policy(args.planner, catalog=load_catalog(), seed=args.seed, world=world)
    )
    result = run(args.scenario, policy, seed=args.seed)
    offered: defaultdict[str, float] = defaultdict(float)
    finished: defaultdict[str, float] = defaultdict(float)
    for tick in result.trace.ticks:
        for w in tick.jobs:
            offered[w.job_id] += w.offered
            finished[w.job_id] += w.finished
    jobs = {
        j: {
            "completed_per_request": round(policy.completed[j] / policy.requests[j], 3),
            "windows_over": policy.over[j],
            "finished_per_offered": round(finished[j] / offered[j], 3) if offered[j] else None,
        }
        for j in sorted(result.trace.online_jobs)
        if policy.requests[j] > 0
    }
    summary = {"scenario": args.scenario, "seed": args.seed, "planner": args.planner}
    print(json.dumps({**summary, "jobs": jobs}, indent=2))


if __name__ == "__main__":
    main()
