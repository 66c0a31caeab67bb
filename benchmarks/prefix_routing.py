"""Prefix caching and routing: what the surrogate predicts and what the world serves.

Prints JSON.  ``python benchmarks/prefix_routing.py [--scenario hetero-3h] [--job rag-qwen32b]
[--gpu H100-SXM] [--tp 1] [--replicas 4] [--windows 3] [--seed 0]``.

For one job of a built-in scenario, one rank of ``replicas`` copies on the first pool of the
scenario with that GPU is predicted (``Surrogate.predict``, replay) and served in the world for
``windows`` ticks under each routing; the JSON holds the predicted prefix-cache hit rate, p99
TTFT and saturation capacity, and the world's observed hit rate and p99 TTFT (mean over the
windows after the first, whose cache starts cold).
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import attrs

from koi.catalog import load_catalog
from koi.sim import build_world, load_scenario
from koi.surrogate import Surrogate
from koi.types import ActionKind, Chain, Config, JobAction, Ladder, Plan, Rank, Routing


def _world(scenario: Any, job_id: str, ladder_of: Any, windows: int, seed: int) -> dict[str, Any]:
    # The scenario reduced to the one job, arriving at the start, without events.
    job = attrs.evolve(next(j for j in scenario.jobs if j.id == job_id), arrival_s=0.0)
    sc = attrs.evolve(scenario, jobs=(job,), events=())
    world = build_world(sc, seed=seed)
    tick = sc.tick_s
    hits, ttfts = [], []
    for k in range(windows):
        world.begin_tick(k, k * tick)
        if k == 0:
            plan = Plan(0.0, [JobAction(job_id, ActionKind.PLACE, ladder_of(world.snapshot()))])
            world.apply(plan)
        obs, _ = world.serve((k + 1) * tick)
        if k > 0:
            hits += [o.mediators.prefix_hit_rate for o in obs if o.requests]
            ttfts += [o.outcomes.p99_ttft_ms for o in obs if o.requests]
    return {
        "observed_prefix_hit_rate": statistics.mean(hits) if hits else None,
        "observed_p99_ttft_ms": statistics.mean(ttfts) if ttfts else None,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", default="hetero-3h")
    p.add_argument("--job", default="rag-qwen32b")
    p.add_argument("--gpu", default="H100-SXM")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    catalog = load_catalog()
    scenario = load_scenario(args.scenario)
    job = next(j for j in scenario.jobs if j.id == args.job)
    surrogate = Surrogate(catalog.gpus, catalog.models)
    out: dict[str, Any] = {
        "scenario": args.scenario,
        "job": args.job,
        "prefix_tokens": job.workload.shared_prefix_tokens,
        "prefixes": job.workload.prefix_count,
        "rate_rps": job.workload.rate_rps,
        "gpu": args.gpu,
        "tp": args.tp,
        "replicas": args.replicas,
        "routing": {},
    }
    for routing in (Routing.ROUND_ROBIN, Routing.LEAST_LOADED, Routing.PREFIX_AFFINITY):

        def ladder_of(snapshot: Any, routing: Routing = routing) -> Ladder:
            pool = next(p for p in snapshot.pools if p.environment.gpu == args.gpu)
            config = Config(tp=args.tp, routing=routing)
            return Ladder((Rank(Chain(job.model, pool.environment, config), args.replicas),))

        world_probe = build_world(scenario, seed=args.seed)
        world_probe.begin_tick(0, 0.0)
        ladder = ladder_of(world_probe.snapshot())
        pred = surrogate.predict(job, ladder)
        out["routing"][routing.value] = {
            "predicted_prefix_hit_rate": pred.mediators.prefix_hit_rate,
            "predicted_p99_ttft_ms": pred.outcomes.p99_ttft_ms,
            "predicted_capacity_tok_s": sum(r.capacity_tok_s for r in pred.ranks),
            **_world(scenario, args.job, ladder_of, args.windows, args.seed),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
