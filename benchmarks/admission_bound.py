"""How much online admission any planner can reach when a job's first chain must load first.

Online admission (docs/evaluation.md) is the mean over online jobs of the share of offered
requests the world finished.  A job's requests start arriving at its ``arrival_min``, but no
planner sees it before the first tick at or after that moment, and no chain serves before it
has loaded: ``base_s + weights / load_gib_s + warmup_s`` (``koi.sim.LaunchConfig``; the
launch jitter has mean 1, so the bound holds in expectation).  Taking, per job, the fastest
chain the world could start for it (every pool, tensor parallelism 1–8, every precision the
job accepts) and its base rate held over its life, the share it loses is ``(first tick +
fastest load - arrival) / (end - arrival)``; one minus its mean over the online jobs bounds
any planner's online admission.
Surges, failed launches, spot losses and capacity are left out, so the true ceiling is lower.
Prints JSON::

    python benchmarks/admission_bound.py --scenario hetero-3h

It is a diagnosis of the scenario, not a planner: no planner should be expected above it.
"""

from __future__ import annotations

import argparse
import json
import math

from koi.sim import LaunchConfig, World, build_world
from koi.surrogate import feasibility
from koi.types import Chain, Config, Job

_TP = (1, 2, 4, 8)


def fastest_load_s(world: World, job: Job, launch: LaunchConfig) -> float:
    """Seconds from a plan to serving on the fastest chain the world could start for ``job``."""
    fastest = math.inf
    model = world.models[job.model]
    for pool in world.pools():
        env = pool.environment
        gpu = world.gpus[env.gpu]
        for tp in (t for t in _TP if t <= env.gpus_per_instance):
            for quant in job.precisions:
                chain = Chain(job.model, env, Config(tp=tp, quant=quant))
                if world.true_capacity(chain, job.workload) <= 0:
                    continue  # the world cannot start it
                weights = feasibility(gpu, model, chain.config, env).weights_gib * tp
                fastest = min(fastest, launch.base_s + weights / launch.load_gib_s)
    return fastest + launch.warmup_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    world = build_world(args.scenario, seed=args.seed)
    sc = world.scenario
    rows: list[dict[str, object]] = []
    bounds: list[float] = []
    for job in (j for j in sc.jobs if j.is_online):
        load_s = fastest_load_s(world, job, world.cfg.launch)
        seen = math.ceil(job.arrival_s / sc.tick_s) * sc.tick_s
        life = sc.duration_s - job.arrival_s
        lost = min(1.0, (seen - job.arrival_s + load_s) / life) if life > 0 else 1.0
        bounds.append(100 * (1 - lost))
        rows.append(
            {
                "job": job.id,
                "arrival_min": round(job.arrival_s / 60, 1),
                "first_tick_min": round(seen / 60, 1),
                "fastest_load_s": round(load_s, 1),
                "bound_pct": round(bounds[-1], 1),
            }
        )
    bound = sum(bounds) / len(bounds) if bounds else 100.0
    out = {"scenario": sc.name, "online_jobs": len(rows), "admission_bound_pct": round(bound, 1)}
    print(json.dumps(out | {"jobs": rows}, indent=1))


if __name__ == "__main__":
    main()
