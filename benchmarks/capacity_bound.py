"""How much online demand a scenario's fleet could carry at the world's true capacities.

Two linear-programming upper bounds, both diagnoses of the scenario read from the world's truth
(``World.true_capacity``, ``World.true_workload``), never planners: where a bound is 100 %,
online admission below it is the planners' loss, not the fleet's.

*At the start* (the default): replicas continuous, every online job present at once at its
base rate, events and batch jobs left out.  Each online job ``j`` is served a share ``s_j <= 1``
of its offered output tokens/s, carried by replicas of any chain the world can start for it
(every pool, tensor parallelism 1–8, the precisions the job accepts) at one replica's true
saturated capacity times ``--load`` (the share of saturation an SLO leaves usable), within every
pool's GPUs.  Prints the bound on the mean served share, the jobs below 100 % and the fewest
GPUs that carry every online job.

*Over the run* (``--over-time``): the world is stepped tick by tick with nothing deployed, so
its events happen as they do for every planner — driver updates that move a GPU type's speed,
workload drift, surges, pool capacity changes — and each tick records the online tokens each
present job was offered and each pool's GPUs.  One LP over all ticks then gives the GPUs of
each pool to the jobs, tick by tick, at each (job, pool)'s best true tokens/s per GPU in that
tick (the best over the engines of ``--engines``, all by default, tensor and pipeline
parallelism within an instance, the job's precisions and batch caps of 16–1,024), and lets a
job serve in a later tick what was offered earlier (a backlog), never more than it was offered
so far.  The objective is the evaluator's
online admission: the mean over online jobs of tokens served / tokens offered.  It is solved
twice: for the online jobs alone, and with every batch job's work to be done between its
arrival and its deadline first (a share of it the fleet cannot finish is reported).  Replicas
are continuous, launches take no time and the load is ``--load`` of saturation.  It is a bound at
the world's own capacity formula (the one its router uses), not a proof: the formula adds a
request's prefill and decode and counts no prefix-cache hits, so an engine that overlaps them
can carry somewhat more.  ``koi.sim.online_admission`` counts requests; the bound counts their
tokens, which the world draws from the same distribution::

    python benchmarks/capacity_bound.py --scenario hetero-3h --seed 0 --load 0.6
    python benchmarks/capacity_bound.py --scenario homo-12h --seed 3 --over-time
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from koi.sim import DeferAll, World, build_world
from koi.types import Chain, Config, Engine, Environment, Job, Pool, WorkloadProfile

_TP = (1, 2, 4, 8)
_PP = (1, 2)
_BATCHES = (16, 32, 64, 128, 256, 512, 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load", type=float, default=1.0, help="usable share of saturation")
    ap.add_argument("--over-time", action="store_true", help="step the world through its events")
    ap.add_argument(
        "--engines",
        default=",".join(e.value for e in Engine),
        help="--over-time: the engines a chain may run (comma-separated; default all)",
    )
    args = ap.parse_args()
    world = build_world(args.scenario, seed=args.seed)
    known = {e.value for e in Engine}
    if not set(args.engines.split(",")) <= known:
        ap.error(f"--engines: each must be one of {', '.join(sorted(known))}, got {args.engines!r}")
    engines = tuple(Engine(e) for e in args.engines.split(","))
    out = over_time(world, args.load, engines) if args.over_time else at_start(world, args.load)
    print(json.dumps({"scenario": args.scenario, "seed": args.seed, "load": args.load, **out}))


def at_start(world: World, load: float) -> dict[str, Any]:
    """The bound with every online job present at its base rate on the pools at ``t = 0``."""
    pools = world.pools()
    jobs = [j for j in world.scenario.jobs if j.is_online]
    cols = []  # (job, pool, GPUs per replica, usable tokens/s per replica)
    for ji, job in enumerate(jobs):
        for pi, pool in enumerate(pools):
            env = pool.environment
            for tp in (t for t in _TP if t <= env.gpus_per_instance):
                for quant in job.precisions:
                    chain = Chain(job.model, env, Config(tp=tp, quant=quant))
                    cap = world.true_capacity(chain, job.workload) * load
                    if cap > 0:
                        cols.append((ji, pi, tp, cap))
    nx, nj = len(cols), len(jobs)
    a = np.zeros((nj + len(pools), nx + nj))
    b = np.zeros(nj + len(pools))
    for k, (ji, pi, tp, cap) in enumerate(cols):
        a[ji, k] = -cap  # capacity >= s_j * demand_j
        a[nj + pi, k] = tp  # GPUs within the pool
    for ji, job in enumerate(jobs):
        a[ji, nx + ji] = job.workload.offered_output_tok_s
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
    return {
        "online_jobs": nj,
        "fleet_gpus": int(b[nj:].sum()),
        "bound_mean_served_pct": round(100 * float(shares.mean()), 1),
        "below_100_pct": {
            j.id: round(100 * float(s), 1) for j, s in zip(jobs, shares, strict=True) if s < 0.999
        },
        "fewest_gpus_all_online": round(float(fewest.fun), 1) if fewest.success else None,
    }


def _configs(job: Job, env: Environment, engines: tuple[Engine, ...]) -> Iterator[Config]:
    for engine in engines:
        for tp in _TP:
            for pp in _PP:
                if tp * pp > env.gpus_per_instance:
                    continue
                for quant in job.precisions:
                    for batch in _BATCHES:
                        yield Config(engine=engine, tp=tp, pp=pp, quant=quant, max_batch_size=batch)


def _per_gpu(
    world: World, job: Job, workload: WorkloadProfile, pool: Pool, engines: tuple[Engine, ...]
) -> float:
    """The best true saturated output tokens/s per GPU of ``job`` (serving ``workload``) on
    ``pool`` now."""
    best = 0.0
    for config in _configs(job, pool.environment, engines):
        cap = world.true_capacity(Chain(job.model, pool.environment, config), workload)
        best = max(best, cap / config.gpus)
    return best


@attrs.define
class _Run:
    """What the LP reads of a run, tick by tick: each tick's length and pools' GPUs; per
    present online job the tokens offered in the tick; per batch job still before its deadline
    the seconds of the tick it may run; per present job its tokens/s per GPU on each pool."""

    spans: list[float] = attrs.field(factory=list)
    gpus: list[list[float]] = attrs.field(factory=list)
    offered: list[dict[str, float]] = attrs.field(factory=list)
    open_s: list[dict[str, float]] = attrs.field(factory=list)
    rates: list[dict[str, list[float]]] = attrs.field(factory=list)


def over_time(world: World, load: float, engines: tuple[Engine, ...]) -> dict[str, Any]:
    """The bound over the run, the world's events included (module docstring)."""
    sc = world.scenario
    online = {j.id for j in sc.jobs if j.is_online}
    defer = DeferAll()
    run = _Run()
    notes: list[str] = []
    memo: dict[tuple[Any, ...], float] = {}
    for k in range(sc.ticks):
        t = k * sc.tick_s
        end = min(t + sc.tick_s, sc.duration_s)
        notes += [f"{t / 60:.0f} min: {n}" for n in world.begin_tick(k, t) if "driver" in n]
        snapshot = world.snapshot()
        world.apply(defer.decide(snapshot, ()))
        world.preempt_unannounced()
        _, windows = world.serve(end)
        run.spans.append(end - t)
        run.gpus.append(
            [p.capacity_instances * p.environment.gpus_per_instance for p in snapshot.pools]
        )
        run.offered.append({w.job_id: w.offered_tokens for w in windows if w.job_id in online})
        run.open_s.append(
            {
                j.id: min(end, j.target.due_s) - max(t, j.arrival_s)
                for j in snapshot.jobs
                if not j.is_online and min(end, j.target.due_s) > max(t, j.arrival_s)
            }
        )
        rates = {}
        for job in snapshot.jobs:
            if job.id in run.offered[-1] or job.id in run.open_s[-1]:
                workload = world.true_workload(job.id)
                row = []
                for pool in snapshot.pools:
                    # The truth moves with driver updates (counted by their notes) and drift.
                    key = (job.id, pool.id, workload, len(notes))
                    if key not in memo:
                        memo[key] = _per_gpu(world, job, workload, pool, engines) * load
                    row.append(memo[key])
                rates[job.id] = row
        run.rates.append(rates)
    totals: dict[str, float] = {}
    for offered in run.offered:
        for j, tok in offered.items():
            totals[j] = totals.get(j, 0.0) + tok
    jobs = sorted(j for j, tok in totals.items() if tok > 0)
    need = {
        j.id: (j.workload.total_requests or 0) * world.true_workload(j.id).output_len.mean
        for j in sc.jobs
        if not j.is_online
    }
    out: dict[str, Any] = {
        "engines": [e.value for e in engines],
        "online_jobs": len(jobs),
        "batch_jobs": len(need),
    }
    for label, batch in (("online_only", {}), ("batch_deadlines_kept", need)):
        served, missed = _solve(jobs, totals, batch, run)
        shares = {j: served[j] / totals[j] for j in jobs}
        out[label] = {
            "bound_online_admission_pct": round(100 * sum(shares.values()) / len(jobs), 1),
            "below_100_pct": {j: round(100 * s, 1) for j, s in shares.items() if s < 0.999},
        }
        if batch:
            out[label]["batch_work_short_pct"] = {
                j: round(100 * m, 1) for j, m in missed.items() if m > 1e-3
            }
    out["driver_updates"] = notes
    return out


#: What a batch job's missed share costs in the objective: more than every online job's whole
#: admission, so the LP meets every deadline it can and only then serves online demand.
_MISS_PENALTY = 1e3


def _solve(
    jobs: list[str], totals: dict[str, float], need: dict[str, float], run: _Run
) -> tuple[dict[str, float], dict[str, float]]:
    """Tokens each online job serves over the run, and the share of each batch job's work
    left undone by its deadline, in the LP of :func:`over_time`.

    Variables per tick: ``g[j, p]`` GPUs of pool ``p`` given to job ``j`` and ``x[j]`` tokens
    it serves; per batch job a share ``m[b]`` of its work missed.  Constraints: ``x[j] <= span ·
    Σ_p rate[j, p] · g[j, p]`` (a batch job's span ends at its deadline); ``Σ_j g[j, p] <= G[p]``;
    an online job's ``Σ_{s <= t} x[j, s] <= Σ_{s <= t} offered[j, s]``; a batch job's ``Σ_t
    x[b, t] >= need[b] · (1 − m[b])``.  Objective: ``max Σ_j x[j] / total[j] − P · Σ_b m[b]``.
    """
    entries: list[tuple[int, int, float]] = []  # (row, variable, coefficient)
    b: list[float] = []
    cost: list[float] = []
    xs: dict[str, list[int]] = {j: [] for j in (*jobs, *need)}  # x variables, tick by tick
    so_far = dict.fromkeys(jobs, 0.0)

    def var(c: float) -> int:
        cost.append(c)
        return len(cost) - 1

    def constraint(terms: list[tuple[int, float]], bound: float) -> None:
        entries.extend((len(b), v, c) for v, c in terms)
        b.append(bound)

    for t, span in enumerate(run.spans):
        rates = run.rates[t]
        for j in jobs:  # offered whether or not the job can be served in this tick
            so_far[j] += run.offered[t].get(j, 0.0)
        spans = {j: span for j in jobs if j in rates}
        spans |= {j: s for j, s in run.open_s[t].items() if j in need and j in rates}
        pools = range(len(run.gpus[t]))
        g = {(j, p): var(0.0) for j in spans for p in pools if rates[j][p] > 0}
        for j, open_s in spans.items():
            x = var(-1.0 / totals[j] if j in totals else 0.0)
            xs[j].append(x)
            carried = [(g[j, p], -open_s * rates[j][p]) for p in pools if (j, p) in g]
            constraint([(x, 1.0), *carried], 0.0)
            if j in so_far:
                constraint([(v, 1.0) for v in xs[j]], so_far[j])
        for p in pools:
            users = [(g[j, p], 1.0) for j in spans if (j, p) in g]
            if users:
                constraint(users, run.gpus[t][p])
    misses = {}
    for j, tokens in need.items():
        misses[j] = m = var(_MISS_PENALTY)
        # -sum x - need * m <= -need
        constraint([*((v, -1.0) for v in xs[j]), (m, -tokens)], -tokens)
    r, c, v = zip(*entries, strict=True)
    a = sp.csr_matrix((v, (r, c)), shape=(len(b), len(cost)))
    bounds = [(0.0, 1.0) if k in misses.values() else (0.0, None) for k in range(len(cost))]
    result = linprog(np.array(cost), A_ub=a, b_ub=np.array(b), bounds=bounds, method="highs")
    if not result.success:
        raise SystemExit(f"capacity_bound: the LP failed: {result.message}")
    served = {j: float(sum(result.x[v] for v in xs[j])) for j in jobs}
    return served, {j: float(result.x[m]) for j, m in misses.items()}


if __name__ == "__main__":
    main()
