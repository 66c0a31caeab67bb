"""How much online demand a scenario's fleet could carry at the world's true capacities.

A linear-programming upper bound (replicas continuous, every online job present at once at its
base rate, events and batch jobs left out): each online job ``j`` is served a share
``s_j <= 1`` of its offered output tokens/s, carried by replicas of any chain the world can
start for it (every pool, tensor parallelism 1–8, the precisions the job accepts) at one
replica's true saturated capacity times ``--load`` (the share of saturation an SLO leaves
usable), within every pool's GPUs.  Prints JSON: the bound on the mean served share, the
jobs below 100 %, and the fewest GPUs that carry every online job::

    python benchmarks/capacity_bound.py --scenario hetero-3h --seed 0 --load 0.6

It reads the world's truth (``World.true_capacity``) and is a diagnosis of the scenario, not a
planner: when the bound is 100 %, online admission below it is the planners' loss, not the
fleet's.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.optimize import linprog

from koi.sim import build_world
from koi.types import Chain, Config

_TP = (1, 2, 4, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load", type=float, default=1.0, help="usable share of saturation")
    args = ap.parse_args()
    world = build_world(args.scenario, seed=args.seed)
    pools = world.pools()
    jobs = [j for j in world.scenario.jobs if j.is_online]
    cols = []  # (job, pool, GPUs per replica, usable tokens/s per replica)
    for ji, job in enumerate(jobs):
        for pi, pool in enumerate(pools):
            env = pool.environment
            for tp in (t for t in _TP if t <= env.gpus_per_instance):
                for quant in job.precisions:
                    chain = Chain(job.model, env, Config(tp=tp, quant=quant))
                    cap = world.true_capacity(chain, job.workload) * args.load
                    if cap > 0:
                        cols.append((ji, pi, tp, cap))
    nx, nj = len(cols), len(jobs)
    a = np.zeros((nj + len(pools), nx + nj))
    b = np.zeros(nj + len(pools))
    for k, (ji, pi, tp, cap) in enumerate(cols):
        a[ji, k] = -cap  # capacity >= s_j * demand_j
        a[nj + pi, k] = tp  # GPUs within the pool
    for ji, job in enumerate(jobs):
        a[ji, nx + ji] = job.workload.rate_rps * job.workload.output_len.mean
    b[nj:] = [p.capacity_instances * p.environment.gpus_per_instance for p in pools]
    served = linprog(
        np.concatenate([np.zeros(nx), -np.ones(nj)]),
        A_ub=a,
        b_ub=b,
        bounds=[(0, None)] * nx + [(0, 1)] * nj,
        method="highs",
    )
    fewest = linprog(
        np.concatenate([[tp for _, _, tp, _ in cols], np.zeros(nj)]),
        A_ub=a,
        b_ub=b,
        bounds=[(0, None)] * nx + [(1, 1)] * nj,
        method="highs",
    )
    shares = served.x[nx:]
    print(
        json.dumps(
            {
                "scenario": args.scenario,
                "seed": args.seed,
                "load": args.load,
                "online_jobs": nj,
                "fleet_gpus": int(b[nj:].sum()),
                "bound_mean_served_pct": round(100 * float(shares.mean()), 1),
                "below_100_pct": {
                    j.id: round(100 * float(s), 1)
                    for j, s in zip(jobs, shares, strict=True)
                    if s < 0.999
                },
                "fewest_gpus_all_online": round(float(fewest.fun), 1) if fewest.success else None,
            }
        )
    )


if __name__ == "__main__":
    main()
