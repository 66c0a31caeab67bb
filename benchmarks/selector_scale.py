"""Scale benchmark of the joint selector (issue 5, DESIGN §12).

Builds a random but realistic instance — jobs with several candidates over shared pools of
different GPU kinds and instance sizes, a third of the jobs active with a keep option and
reconfigure options under a swap budget, tenants with GPU quotas, three priority levels and
exploration items — solves it with :func:`koi.selector.select` and prints JSON::

    python benchmarks/selector_scale.py --jobs 1000 --candidates 50 --pools 200 --seed 0
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Hashable
from typing import Any

import numpy as np

from koi.selector import Candidate, PoolCapacity, SelectionProblem, greedy, select

# (GPU kind, relative speed, USD per GPU-hour, GPUs per instance options)
_GPUS = (
    ("H100-SXM", 1.0, 3.9, (8,)),
    ("H200", 1.3, 4.6, (8,)),
    ("B200", 2.0, 6.5, (8,)),
    ("A100-80GB", 0.55, 2.4, (1, 2, 4, 8)),
    ("L40S", 0.35, 1.4, (1, 4, 8)),
    ("L4", 0.12, 0.7, (1, 4, 8)),
    ("A10G", 0.1, 1.0, (1, 4)),
    ("RTXPRO6000", 0.45, 1.9, (1, 8)),
    ("MI300X", 1.1, 3.4, (8,)),
)


def build_instance(jobs: int, candidates: int, pools: int, seed: int = 0) -> SelectionProblem:
    """A random selection instance with contention, keeps, swaps, quotas and priorities."""
    rng = np.random.default_rng(seed)
    pool_caps: list[PoolCapacity] = []
    speed: dict[str, float] = {}
    for p in range(pools):
        kind, s, price, sizes = _GPUS[int(rng.integers(len(_GPUS)))]
        gpi = int(rng.choice(sizes))
        pool_caps.append(
            PoolCapacity(
                pool_id=f"pool{p}",
                capacity_gpus=0,  # set below once demand is known
                gpus_per_instance=gpi,
                price_usd_per_h=price * gpi * float(rng.uniform(0.6, 1.1)),
                gpu_type=kind,
            )
        )
        speed[f"pool{p}"] = s
    by_id = {pc.pool_id: pc for pc in pool_caps}
    tenants = [f"tenant{t}" for t in range(5)]
    cands: list[Candidate] = []
    priority: dict[str, int] = {}
    quota_group: dict[str, str] = {}
    held_gpus: dict[str, dict[str, int]] = {}
    demand = np.zeros(pools)
    items = [("edge", e, "stratum", s) for e in range(60) for s in range(10)]
    n_active = 0
    for j in range(jobs):
        job = f"job{j}"
        online = rng.random() < 0.6
        prio = int(rng.choice([0, 1, 2], p=[0.6, 0.3, 0.1]))
        priority[job] = prio
        quota_group[job] = tenants[int(rng.integers(len(tenants)))]
        need = float(rng.lognormal(mean=1.0, sigma=0.8))  # H100-equivalents to meet the SLO
        book = rng.choice(pools, size=min(pools, int(rng.integers(4, 12))), replace=False)
        defer_value = -(8.0 if online else float(rng.uniform(1.0, 8.0))) * (1 + 0.5 * prio)
        active = rng.random() < 0.35
        options = []
        for _ in range(candidates * 3):
            pid = f"pool{int(rng.choice(book))}"
            gpi = by_id[pid].gpus_per_instance
            per_chain = int(rng.choice([g for g in (1, 2, 4, 8) if g <= gpi or g % gpi == 0]))
            replicas = int(rng.integers(1, 5))
            gpus = per_chain * replicas
            served = gpus * speed[pid] / need
            cost_gap = (
                by_id[pid].price_usd_per_h / by_id[pid].gpus_per_instance * gpus / (3.9 * need)
            )
            latency_gap = 0.6 / max(served, 1e-3)
            violation = 4.0 * max(0.0, 1.0 / max(served, 1e-3) - 1.0)
            g = max(cost_gap, latency_gap + min(violation, 40.0))
            j_val = -(g + 0.005 * (cost_gap + latency_gap + violation))
            p_breach = float(rng.beta(1.0, 12.0)) * (1.5 if served < 1.2 else 1.0)
            value = j_val - 2.0 * min(p_breach, 1.0)
            if value > defer_value:
                options.append((value, pid, gpus))
            if len(options) >= candidates - 1:
                break
        held: dict[str, int] = {}
        if active and options:
            n_active += 1
            _, pid, gpus = options[int(rng.integers(len(options)))]
            held = {pid: gpus}
            held_gpus[job] = held
            cands.append(Candidate(job, "keep", "keep", float(options[0][0]) - 0.3, held))
            demand[int(pid[4:])] += gpus
        else:
            cands.append(Candidate(job, "defer", "defer", defer_value))
        for n, (value, pid, gpus) in enumerate(options):
            covers = frozenset(
                items[int(i)] for i in rng.choice(len(items), size=int(rng.integers(0, 3)))
            )
            if held:
                switch = float(rng.uniform(0.05, 0.6))
                cands.append(
                    Candidate(
                        job,
                        f"r{n}",
                        "reconfigure",
                        value - switch,
                        {pid: gpus},
                        covers,
                        changes=True,
                    )
                )
            else:
                cands.append(Candidate(job, f"p{n}", "place", value, {pid: gpus}, covers))
            demand[int(pid[4:])] += gpus / max(len(options), 1)
    # Capacity: what the keeps hold plus ~60% of the average candidate demand, whole instances.
    sized = []
    for p, pc in enumerate(pool_caps):
        inst = max(1, math.ceil(demand[p] * 0.6 / pc.gpus_per_instance))
        held_here = sum(h.get(pc.pool_id, 0) for h in held_gpus.values())
        inst = max(inst, math.ceil(held_here / pc.gpus_per_instance))
        sized.append(
            PoolCapacity(
                pc.pool_id,
                inst * pc.gpus_per_instance,
                pc.gpus_per_instance,
                pc.price_usd_per_h,
                pc.gpu_type,
            )
        )
    total = sum(pc.capacity_gpus for pc in sized)
    quota_caps = {t: int(total * 0.3) for t in tenants}
    held_by_tenant = dict.fromkeys(tenants, 0)
    for job, h in held_gpus.items():
        held_by_tenant[quota_group[job]] += sum(h.values())
    quota_caps = {t: max(c, held_by_tenant[t]) for t, c in quota_caps.items()}
    weights: dict[Hashable, float] = {it: 0.2 * float(rng.uniform(0.0, 1.0)) for it in items}
    return SelectionProblem(
        candidates=cands,
        pools=sized,
        exploration_weights=weights,
        swap_budget=max(1, n_active // 10),
        priority=priority,
        quota_group=quota_group,
        quota_caps=quota_caps,
        held_gpus=held_gpus,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--pools", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1, help="run seeds seed..seed+n-1, report median")
    ap.add_argument("--time-limit", type=float, default=4.5)
    ap.add_argument("--gap", type=float, default=0.01)
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    for seed in range(args.seed, args.seed + args.seeds):
        problem = build_instance(args.jobs, args.candidates, args.pools, seed)
        t0 = time.perf_counter()
        sel = select(problem, time_limit_s=args.time_limit, mip_rel_gap=args.gap)
        wall = time.perf_counter() - t0
        g0 = time.perf_counter()
        greedy(problem)
        runs.append(
            {
                "seed": seed,
                "wall_s": round(wall, 4),
                "status": sel.status.value,
                "objective": round(sel.objective, 4),
                "bound": round(sel.bound, 4),
                "gap": round(sel.gap, 6),
                "greedy_objective": round(sel.greedy_objective, 4),
                "greedy_wall_s": round(time.perf_counter() - g0, 4),
                "candidates": len(problem.candidates),
                "pruned": sel.pruned,
                "binding": len(sel.binding),
            }
        )
    out: dict[str, object] = dict(runs[0]) if len(runs) == 1 else {"runs": runs}
    if len(runs) > 1:
        out["median_wall_s"] = statistics.median(float(r["wall_s"]) for r in runs)
        out["median_gap"] = statistics.median(float(r["gap"]) for r in runs)
    out.update(jobs=args.jobs, candidates_per_job=args.candidates, pools=args.pools)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
