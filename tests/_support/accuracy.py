"""Accuracy of ``koi predict`` against public measurements (tests/surrogate/data/measurements.csv).

Each row is one deployment at a fixed concurrency, scored with its own engine and its source's
load protocol (tests/surrogate/data/protocols.csv: burst or steady state, request count,
length range, each with the source's own description as evidence).  The predicted mean TTFT /
TPOT over the protocol's run are compared with the measured means (medians with medians for a
source whose protocol's ``statistic`` is ``p50``).  Throughput is output
tokens/s.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable
from pathlib import Path

from koi.surrogate import LoadProtocol, SurrogateConfig, predict_serving
from koi.types import Config
from tests._support.specs import gpus, measured_models

DATA = Path(__file__).resolve().parent.parent / "surrogate" / "data" / "measurements.csv"
PROTOCOLS = DATA.parent / "protocols.csv"
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
        if key == "silicon_sample" and key in s:
            return "silicon 2026-04-06" if "id=2026_04_06_" in s else "silicon gap-analysis"
        if key in s:
            return label
    return s[:40]


def rows(split: str | None = None) -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        out = list(csv.DictReader(f))
    return [r for r in out if split is None or r["split"] == split]


def protocols() -> list[dict[str, str]]:
    with PROTOCOLS.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def protocol_source(row: dict[str, str]) -> dict[str, str]:
    """The protocols.csv entry of the row's source (first ``match`` found in its source)."""
    for p in protocols():
        if p["match"] in row["source"]:
            return p
    raise KeyError(f"no protocol recorded for source {row['source'][:60]!r}")


def protocol_of(row: dict[str, str]) -> LoadProtocol:
    """The load protocol the row's source ran at the row's concurrency."""
    p = protocol_source(row)
    conc = int(row["concurrency"])
    per_client = p["requests_per_client"]
    return LoadProtocol(
        concurrency=conc,
        burst=p["burst"] == "true",
        request_count=int(per_client) * conc if per_client and p["burst"] == "true" else None,
        length_range=(float(p["length_low"]), float(p["length_high"])),
    )


def row_config(row: dict[str, str]) -> Config:
    """The deployment a row measured (a batch cap the row's concurrency fits under)."""
    return Config(
        engine=row["engine"],
        tp=int(row["tp"]),
        pp=int(row["pp"] or 1),
        quant=row["quant"],
        max_batch_size=max(256, int(row["concurrency"])),
    )


def predict_row(
    row: dict[str, str], cfg: SurrogateConfig, *, replay: bool = True
) -> dict[str, float] | None:
    config = row_config(row)
    p = predict_serving(
        gpus()[row["gpu"]],
        measured_models()[row["model"]],
        config,
        isl=int(row["isl"]),
        osl=int(row["osl"]),
        protocol=protocol_of(row),
        cfg=cfg,
        replay=replay,
    )
    if not p.feasible:
        return None
    if protocol_source(row)["statistic"] == "p50":  # a source that publishes medians
        return {
            "ttft_ms": p.p50_ttft_ms,
            "tpot_ms": p.p50_tpot_ms,
            "throughput_tok_s": p.throughput_tok_s,
        }
    return {
        "ttft_ms": p.mean_ttft_ms,
        "tpot_ms": p.mean_tpot_ms,
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
