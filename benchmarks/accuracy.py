"""Surrogate accuracy against public measurements, broken down, printed as Markdown tables.

    .venv/bin/python benchmarks/accuracy.py [--split heldout] [--analytic] [--by gpu,tp_pp]

Scores every row of tests/surrogate/data/measurements.csv of the split with
``tests/_support/accuracy.py`` (the harness the accuracy tests assert on) and prints, per
group, the row count, the median and p90 absolute percentage error and the bias (median
predicted / measured) of TTFT, TPOT and throughput.  Groups: ``all``, then each key of
``--by`` (``gpu``, ``tp_pp``, ``engine``, ``source``, ``model``), and ``gpu x tp_pp``.
``--dump FILE`` also writes every row's errors, for ``benchmarks/paired_accuracy.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from tests._support.accuracy import METRICS, predict_row, rows, source_label

from koi.surrogate import SurrogateConfig

ROW_KEY: tuple[str, ...] = (
    "source",
    "gpu",
    "model",
    "engine",
    "tp",
    "pp",
    "quant",
    "isl",
    "osl",
    "concurrency",
    *METRICS,
)


def _p90(v: list[float]) -> float:
    s = sorted(v)
    return s[min(int(0.9 * len(s)), len(s) - 1)]


def _group_key(row: dict[str, str], by: str) -> str:
    if by == "tp_pp":
        return f"TP{row['tp']}xPP{row['pp'] or 1}"
    if by == "source":
        return source_label(row)
    if by == "gpu x tp_pp":
        return f"{row['gpu']} TP{row['tp']}xPP{row['pp'] or 1}"
    return row[by]


def row_errors(
    scored: list[tuple[dict[str, str], dict[str, float] | None]],
) -> dict[str, dict[str, float]]:
    """Each feasible row's absolute percentage error per metric, keyed by the row's own fields
    (measured values included), so that runs of two revisions pair row by row."""
    out: dict[str, dict[str, float]] = {}
    for r, p in scored:
        if p is not None:
            key = "|".join(r[k] for k in ROW_KEY)
            out[key] = {m: abs(p[m] - float(r[m])) / float(r[m]) * 100.0 for m in METRICS if r[m]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="heldout", choices=["fit", "heldout", "all"])
    ap.add_argument("--analytic", action="store_true", help="closed-form screen, no replay")
    ap.add_argument("--by", default="gpu,tp_pp,engine,source,gpu x tp_pp")
    ap.add_argument("--gpus", default="", help="only rows of these GPUs (comma-separated)")
    ap.add_argument(
        "--dump", type=Path, help="also write each row's errors as JSON (paired_accuracy.py)"
    )
    args = ap.parse_args()
    cfg = SurrogateConfig()
    data = rows(None if args.split == "all" else args.split)
    if args.gpus:
        data = [r for r in data if r["gpu"] in args.gpus.split(",")]
    scored = [(r, predict_row(r, cfg, replay=not args.analytic)) for r in data]
    infeasible = sum(1 for _, p in scored if p is None)
    if args.dump:
        args.dump.write_text(json.dumps(row_errors(scored), indent=0))
    path = "screen" if args.analytic else "replay"
    only = f" ({args.gpus})" if args.gpus else ""
    print(
        f"split {args.split}{only}, {path}: {len(data)} rows, {infeasible} predicted infeasible\n"
    )
    for by in ["all", *[b.strip() for b in args.by.split(",") if b.strip()]]:
        groups: dict[str, list[tuple[dict[str, str], dict[str, float]]]] = defaultdict(list)
        for r, p in scored:
            if p is not None:
                groups["all" if by == "all" else _group_key(r, by)].append((r, p))
        print(f"| {by} | rows | " + " | ".join(f"{m} med / p90 / bias" for m in METRICS) + " |")
        print("|---|---|" + "---|" * len(METRICS))
        for key in sorted(groups):
            cells = []
            for m in METRICS:
                pairs = [(p[m], float(r[m])) for r, p in groups[key] if r[m]]
                if not pairs:
                    cells.append("—")
                    continue
                ape = [abs(a - b) / b * 100.0 for a, b in pairs]
                bias = statistics.median(a / b for a, b in pairs)
                cells.append(f"{statistics.median(ape):.1f} / {_p90(ape):.1f} / {bias:.2f}")
            print(f"| {key} | {len(groups[key])} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
