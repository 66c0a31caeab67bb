"""``koi scenarios``: list the built-in simulated-fleet scenarios."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "scenarios",
        help="list the built-in benchmark scenarios",
        description=(
            "List the built-in scenarios of the simulated fleet (koi/sim/scenarios/*.toml): "
            "duration, fleet size, GPU types, clouds, markets, jobs and events.  A scenario "
            "file of your own (same format, see docs/scenarios.md) is checked and summarised "
            "with --file."
        ),
    )
    p.add_argument("--file", default=None, help="summarise this scenario TOML file instead")
    p.add_argument(
        "--snapshot",
        default=None,
        metavar="NAME",
        help="print the ClusterSnapshot JSON of scenario NAME (or a scenario file) at its start, "
        "ready for `koi plan`",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_run)


def summary(name_or_path: str) -> dict[str, Any]:
    """One scenario as a JSON-ready summary (pools resolved against the catalog)."""
    from koi.catalog import load_catalog
    from koi.sim import check_names, load_scenario, resolve_pools

    sc = load_scenario(name_or_path)
    cat = load_catalog()
    pools = resolve_pools(sc, tuple(cat.instances))
    check_names(sc, pools, cat.gpus, cat.models)
    return {
        "name": sc.name,
        "description": sc.description,
        "duration_h": sc.duration_s / 3600.0,
        "tick_s": sc.tick_s,
        "gpus": sum(p.capacity_gpus for p in pools),
        "gpu_types": sorted({p.environment.gpu for p in pools}),
        "clouds": sorted({p.environment.cloud for p in pools}),
        "markets": sorted({p.environment.market.value for p in pools}),
        "pools": len(pools),
        "jobs": len(sc.jobs),
        "online_jobs": len(sc.online_jobs),
        "batch_jobs": len(sc.batch_jobs),
        "models": sorted({j.model for j in sc.jobs}),
        "precisions": {j.id: [q.value for q in j.precisions] for j in sc.jobs},
        "events": len(sc.events),
    }


def _run(args: argparse.Namespace) -> int:
    from koi.sim import scenario_names

    if args.snapshot:
        from koi.sim import build_world
        from koi.types import to_json

        print(to_json(build_world(args.snapshot, seed=0).snapshot(), indent=2))
        return 0

    names = [args.file] if args.file else list(scenario_names())
    rows = [summary(n) for n in names]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ("hours", 5), ("GPUs", 5), ("types", 5), ("clouds", 6), ("jobs", 9), ("events", 6)
    print(f"{'name':<12} " + " ".join(f"{c:>{w}}" for c, w in cols))
    for r in rows:
        jobs = f"{r['online_jobs']}+{r['batch_jobs']}"
        print(
            f"{r['name']:<12} {r['duration_h']:>5.1f} {r['gpus']:>5} {len(r['gpu_types']):>5} "
            f"{len(r['clouds']):>6} {jobs:>9} {r['events']:>6}"
        )
    print("jobs = online+batch; details with --json")
    return 0
