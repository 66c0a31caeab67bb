"""Fit the per-request latency floor of each engine on the fit split, printed as JSON.

    .venv/bin/python benchmarks/fit_floor.py

Scores every fit-split row that measured TTFT with its source's protocol and a zero floor,
then picks, per engine, the floor (0-300 ms in 5 ms steps) that minimises the median absolute
percentage error of ``predicted mean TTFT + floor`` against the measured mean.  The floor is
additive, so one replay per row suffices.  Held-out rows are never read.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from tests._support.accuracy import predict_row, rows

from koi.surrogate import SurrogateConfig


def main() -> None:
    base = SurrogateConfig()
    cfg = attrs.evolve(
        base,
        engines={k: attrs.evolve(v, request_floor_ms=0.0) for k, v in base.engines},
    )
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows("fit"):
        if not row["ttft_ms"]:
            continue
        pred = predict_row(row, cfg)
        if pred is not None:
            pairs[row["engine"]].append((pred["ttft_ms"], float(row["ttft_ms"])))
    out = {}
    for engine, pr in sorted(pairs.items()):
        grid = [5.0 * i for i in range(61)]
        scores = {f: statistics.median(abs(p + f - m) / m * 100.0 for p, m in pr) for f in grid}
        best = min(grid, key=lambda f: (scores[f], f))
        out[engine] = {
            "rows": len(pr),
            "floor_ms": best,
            "median_ape_at_floor": round(scores[best], 1),
            "median_ape_without": round(scores[0.0], 1),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
