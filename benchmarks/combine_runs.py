"""Combine the per-run traces of several ``koi bench --out`` directories into one table.

Long comparisons are best run seed by seed (``--seeds 1 --seed-start K`` per directory), so
that a run stopped early still leaves complete seeds; this prints the table and the
per-metric claims over every run found, as ``koi bench`` would have for all seeds at once.

    python benchmarks/combine_runs.py out-seed3 out-seed4 out-seed5 [--markdown]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from koi.baselines import PLANNERS
from koi.bench import aggregate, claims, format_claims, format_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="koi bench --out directories")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables")
    args = parser.parse_args()
    runs = []
    for d in args.dirs:
        for path in sorted((d / "traces").glob("*.json")):
            record = json.loads(path.read_text())
            runs.append({"planner": record["policy"], **record})
    scenarios = {r["scenario"] for r in runs}
    if len(scenarios) != 1:
        raise SystemExit(f"combine_runs: expected runs of one scenario, found {sorted(scenarios)}")
    order = [p for p in PLANNERS if any(r["planner"] == p for r in runs)]
    summary = aggregate(runs, order)
    seeds = sorted({r["seed"] for r in runs})
    print(f"{scenarios.pop()}, seeds {seeds}, {len(runs)} runs")
    print(format_table(summary, markdown=args.markdown))
    print()
    print(format_claims(claims(summary), markdown=args.markdown))


if __name__ == "__main__":
    main()
