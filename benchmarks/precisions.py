"""What the precision policies change: one planner on one scenario, with the scenario's
policies or with every job opened to every precision, and the GPU-hours run in each.

    .venv/bin/python benchmarks/precisions.py [--scenario hetero-3h] [--planner koi]
                                             [--seed 0] [--open]

Prints one JSON object: the composite and goodput of the run, the GPU-hours held by ladders in
each precision (summed from the per-tick snapshots) and per job.  ``--open`` lets every job
accept BF16, FP8 and INT4, which is what every planner assumed before jobs had policies.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence

import attrs

from koi.baselines import REFERENCE, make_policy
from koi.catalog import load_catalog
from koi.sim import build_world, load_scenario, run
from koi.types import ClusterSnapshot, Observation, Plan, Quant


@attrs.define
class _Recorder:
    inner: object
    gpu_s: defaultdict[str, float] = attrs.field(factory=lambda: defaultdict(float))
    by_job: defaultdict[str, defaultdict[str, float]] = attrs.field(
        factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    last: float | None = None

    @property
    def name(self) -> str:
        return str(self.inner.name)  # type: ignore[attr-defined]

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        if self.last is not None:  # what ran since the last tick
            span = snapshot.time_s - self.last
            for a in snapshot.active:
                for r in a.ladder.ranks:
                    q = r.chain.config.quant.value
                    self.gpu_s[q] += r.gpus * span
                    self.by_job[a.job_id][q] += r.gpus * span
        self.last = snapshot.time_s
        plan: Plan = self.inner.decide(snapshot, observations)  # type: ignore[attr-defined]
        return plan


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="hetero-3h")
    p.add_argument("--planner", default="koi")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--open", action="store_true", help="every job accepts every precision")
    args = p.parse_args()
    sc = load_scenario(args.scenario)
    if args.open:
        sc = attrs.evolve(sc, jobs=tuple(attrs.evolve(j, precisions=tuple(Quant)) for j in sc.jobs))
    world = build_world(sc, seed=args.seed) if args.planner in REFERENCE else None
    policy = make_policy(args.planner, catalog=load_catalog(), seed=args.seed, world=world)
    rec = _Recorder(policy)
    result = run(sc, rec, seed=args.seed)
    hours = {q: round(s / 3600, 2) for q, s in sorted(rec.gpu_s.items())}
    print(
        json.dumps(
            {
                "scenario": sc.name,
                "planner": args.planner,
                "seed": args.seed,
                "open": args.open,
                "composite": round(result.metrics.composite, 2),
                "goodput_tok_s": round(result.metrics.goodput_tok_s),
                "gpu_h_by_precision": hours,
                "gpu_h_by_job": {
                    j: {q: round(s / 3600, 2) for q, s in sorted(c.items())}
                    for j, c in sorted(rec.by_job.items())
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
