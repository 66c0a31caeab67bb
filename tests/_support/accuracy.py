"""Accuracy of ``koi predict`` against public measurements (tests/surrogate/data/measurements.csv).

Each row is one deployment at a fixed concurrency (closed loop, fixed input/output lengths).
The predicted median TTFT / TPOT are compared with the measured values (benchmark tools
report means or medians; at fixed lengths the two are close).  Throughput is output tokens/s.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable
from pathlib import Path

from koi.surrogate import SurrogateConfig, predict_serving
from koi.types import Config
from tests._support.specs import gpus, models

DATA = Path(__file__).resolve().parent.parent / "surrogate" / "data" / "measurements.csv"
METRICS = ("ttft_ms", "tpot_ms", "throughput_tok_s")


def source_label(row: dict[str, str]) -> str:
    """A short name for the row's source (the CSV carries the full citation)."""
    s = row["source"]
    for key, label in (
        ("silicon_sample", "aiconfigurator silicon_sample"),
        ("NIM LLM benchmarking", "NIM docs"),
        ("Oracle", "OCI blog"),
        ("nim.csv", "NVIDIA DLI nim.csv"),
    ):
        if key in s:
            return label
    return s[:40]


def rows(split: str | None = None) -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        out = list(csv.DictReader(f))
    return [r for r in out if split is None or r["split"] == split]


def predict_row(
    row: dict[str, str], cfg: SurrogateConfig, *, replay: bool = True
) -> dict[str, float] | None:
    conc = int(row["concurrency"])
    config = Config(
        engine=row["engine"],
        tp=int(row["tp"]),
        pp=int(row["pp"] or 1),
        quant=row["quant"],
        max_batch_size=max(256, conc),
    )
    p = predict_serving(
        gpus()[row["gpu"]],
        models()[row["model"]],
        config,
        isl=int(row["isl"]),
        osl=int(row["osl"]),
        concurrency=conc,
        cfg=cfg,
        replay=replay,
    )
    if not p.feasible:
        return None
    return {
        "ttft_ms": p.p50_ttft_ms,
        "tpot_ms": p.p50_tpot_ms,
        "throughput_tok_s": p.throughput_tok_s,
    }


def errors(
    data: Iterable[dict[str, str]], cfg: SurrogateConfig, *, replay: bool = True
) -> dict[str, list[float]]:
    """Absolute percentage errors per metric over the rows that carry that metric."""
    out: dict[str, list[float]] = {
        "ttft_ms": [],
        "tpot_ms": [],
        "throughput_tok_s": [],
        "infeasible": [],
    }
    for row in data:
        pred = predict_row(row, cfg, replay=replay)
        if pred is None:
            out["infeasible"].append(1.0)
            continue
        for key in ("ttft_ms", "tpot_ms", "throughput_tok_s"):
            if row[key]:
                truth = float(row[key])
                out[key].append(abs(pred[key] - truth) / truth * 100.0)
    return out


def median_ape(
    data: Iterable[dict[str, str]], cfg: SurrogateConfig, *, replay: bool = True
) -> dict[str, float]:
    e = errors(data, cfg, replay=replay)
    return {
        k: (statistics.median(v) if v else float("nan")) if k != "infeasible" else float(len(v))
        for k, v in e.items()
    }
