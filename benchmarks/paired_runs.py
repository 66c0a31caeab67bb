"""Is one revision's planner really better than another's on the bench?  Paired by seed.

    koi bench --scenario hetero-3h --planners koi --seeds 9 --seed-start 3 --out old  # one rev.
    koi bench --scenario hetero-3h --planners koi --seeds 9 --seed-start 3 --out new  # another
    python benchmarks/paired_runs.py --old old --new new [--planner koi] [--resamples 4000]

Each side may name several ``koi bench --out`` directories (seeds run apart).  The runs of
``--planner`` both sides hold for the same scenario and seed are paired; per metric the script
prints, as JSON, both sides' means, the mean per-seed difference (new − old), its 95 % paired
bootstrap interval over the seeds and how many seeds moved each way.  A seed draws the world as
well as the planner's luck, and on ``hetero-3h`` one job's collapse moves a seed's online
admission by five points: a change whose interval straddles zero is one these seeds cannot
tell from the old revision (docs/benchmark.md, "Methodology").
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

METRICS = (
    "composite",
    "online_admission",
    "ttft_attainment",
    "tpot_attainment",
    "deadline_attainment",
    "batch_progress",
    "goodput_tok_s",
    "cost_per_slo_token_usd",
    "swaps",
)

Runs = dict[tuple[str, int], Mapping[str, float]]


def load(dirs: Iterable[Path], planner: str) -> Runs:
    """(scenario, seed) → the metrics of ``planner``'s run, from the directories' traces."""
    out: Runs = {}
    for d in dirs:
        for path in sorted((d / "traces").glob(f"{planner}-seed*.json")):
            record = json.loads(path.read_text())
            out[(record["scenario"], int(record["seed"]))] = record["metrics"]
    return out


def paired(old: Runs, new: Runs, resamples: int, seed: int = 0) -> dict[str, object]:
    """Per metric: the means, the mean paired difference and its bootstrap interval."""
    keys = sorted(set(old) & set(new))
    if not keys:
        raise SystemExit("paired_runs: no (scenario, seed) run is on both sides")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(keys), size=(resamples, len(keys)))
    metrics: dict[str, object] = {}
    for m in METRICS:
        a = np.array([float(old[k][m]) for k in keys])
        b = np.array([float(new[k][m]) for k in keys])
        d = b - a
        lo, hi = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
        metrics[m] = {
            "old_mean": _round(a.mean()),
            "new_mean": _round(b.mean()),
            "difference": _round(d.mean()),
            "interval_95": [_round(lo), _round(hi)],
            "seeds_up": int((d > 0).sum()),
            "seeds_down": int((d < 0).sum()),
            "per_seed": [_round(x) for x in d],
        }
    return {"runs": [f"{s}:{k}" for s, k in keys], "metrics": metrics}


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, nargs="+", required=True, help="koi bench --out dirs")
    ap.add_argument("--new", type=Path, nargs="+", required=True, help="koi bench --out dirs")
    ap.add_argument("--planner", default="koi")
    ap.add_argument("--resamples", type=int, default=4000)
    args = ap.parse_args()
    old, new = load(args.old, args.planner), load(args.new, args.planner)
    print(json.dumps(paired(old, new, args.resamples), indent=2))


if __name__ == "__main__":
    main()
