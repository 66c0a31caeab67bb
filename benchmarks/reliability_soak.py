"""Soak of the C1–C5 property (tests/reliability/test_constraints_wide.py) with the default
configuration (replay engine, two search rounds, the tick deadline on); prints JSON.

Every example is a random or adversarial fleet over every catalog GPU and model, with
finished-but-deployed jobs, shrunk pools, C2-infeasible incumbents, quotas, priorities and, in
one example in ten each, a hanging proposer or one raising ``SystemExit``.  Counted: violations
of C1–C5 or the priority rule, and fallbacks (a tick that gave up although the safe plan is
always valid).

    python benchmarks/reliability_soak.py [--examples 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fleet strategies

from tests.planner._world import CATALOG
from tests.reliability.fleets import Hanging, Raising, check_plan, snapshots

from koi.planner import Planner
from koi.surrogate import Surrogate
from koi.types import ClusterSnapshot


def _situations(snapshot: ClusterSnapshot) -> set[str]:
    jobs = {j.id: j for j in snapshot.jobs}
    out = set()
    held: dict[str, int] = {}
    for a in snapshot.active:
        job = jobs[a.job_id]
        if not job.is_online and job.remaining_requests == 0:
            out.add("finished_deployed")
            continue
        for p, n in a.ladder.gpus_by_pool().items():
            held[p] = held.get(p, 0) + n
    if any(held.get(p.id, 0) > p.capacity_gpus for p in snapshot.pools):
        out.add("shrunk_pool")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    surrogate = Surrogate(dict(CATALOG.gpus), dict(CATALOG.models))
    stats: dict[str, Any] = {
        "examples": 0,
        "violations": 0,
        "fallbacks": 0,
        "c2_infeasible_incumbents": 0,
        "hanging_or_raising_plugins": 0,
        "finished_deployed": 0,
        "shrunk_pool": 0,
        "failures": [],
    }
    tick_s: list[float] = []

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(snapshot=snapshots(), plugin=st.integers(0, 9))
    def run(snapshot: ClusterSnapshot, plugin: int) -> None:
        hanging = Hanging()
        plugins: list[object] = [hanging] if plugin == 0 else []
        if plugin == 1:
            plugins.append(Raising(SystemExit(2)))
        planner = Planner(catalog=CATALOG, plugins=plugins, surrogate=surrogate)
        start = time.perf_counter()
        try:
            result = planner.tick(snapshot)
        finally:
            hanging.release.set()
        tick_s.append(time.perf_counter() - start)
        stats["examples"] += 1
        stats["hanging_or_raising_plugins"] += plugin in (0, 1)
        for s in _situations(snapshot):
            stats[s] += 1
        if any(
            not planner.surrogate.feasibility(r.chain).ok
            for a in snapshot.active
            for r in a.ladder.ranks
        ):
            stats["c2_infeasible_incumbents"] += 1
        if result.fallback:
            stats["fallbacks"] += 1
            stats["failures"].append({"fallback": list(result.errors)[:2]})
        try:
            check_plan(planner, snapshot, result)
        except AssertionError as exc:  # counted, not shrunk: the soak reports, the test fails
            stats["violations"] += 1
            stats["failures"].append({"violation": str(exc)[:300]})

    run._hypothesis_internal_use_seed = args.seed  # type: ignore[attr-defined]
    start = time.perf_counter()
    run()
    stats["seconds"] = round(time.perf_counter() - start, 1)
    tick_s.sort()
    stats["tick_median_s"] = round(tick_s[len(tick_s) // 2], 3) if tick_s else None
    stats["failures"] = stats["failures"][:10]
    print(json.dumps(stats, indent=2))
    return stats


if __name__ == "__main__":
    main()
