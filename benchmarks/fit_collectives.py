"""Fit the surrogate's all-reduce model per interconnect kind on measured NCCL tables.

    .venv/bin/python benchmarks/fit_collectives.py

Data: tests/surrogate/data/nccl_allreduce.csv, aiconfigurator-core 0.12.0's measured NCCL
``all_reduce`` tables (FP16, 2/4/8 GPUs, 256 to 268M elements) for H100-SXM, H200, A100-SXM and
B200 (NVLink), an RTX PRO 6000 server (PCIe Gen5 with peer-to-peer) and an L40S node (PCIe Gen4,
host-staged: its bus bandwidth falls 13x from 2 to 8 GPUs).  This is the collective model's
fit split (docs/surrogate.md, "Constants"); no serving measurement is involved.

Model (``koi.surrogate.Collective``), per kind, for ``n`` GPUs and ``S`` bytes::

    t = λ0 + λ1·(n − 1) + 2(n − 1)/n · S / (B_link · η · (2/n)^γ)

``γ`` is how the bus bandwidth per GPU falls as more GPUs share a path (0 on a switched
fabric; large when transfers are staged through host memory).  Fitted by least squares on
log-time; prints the constants and the median / p90 relative error per system and GPU count.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

DATA = (
    Path(__file__).resolve().parent.parent / "tests" / "surrogate" / "data" / "nccl_allreduce.csv"
)


def load() -> list[dict[str, str]]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def model(p: np.ndarray, n: np.ndarray, size: np.ndarray, link: np.ndarray) -> np.ndarray:
    lat0, lat1, eta, gamma = p
    bw = link * eta * (2.0 / n) ** gamma
    return np.asarray(lat0 + lat1 * (n - 1) + 2.0 * (n - 1) / n * size / bw, dtype=float)


def fit(rows: list[dict[str, str]]) -> np.ndarray:
    n = np.array([float(r["gpus"]) for r in rows])
    size = np.array([2.0 * float(r["elements"]) for r in rows])  # FP16 elements -> bytes
    link = np.array([float(r["link_gb_s"]) * 1e9 for r in rows])
    t = np.array([float(r["latency_ms"]) * 1e-3 for r in rows])

    def resid(p: np.ndarray) -> np.ndarray:
        return np.asarray(np.log(model(p, n, size, link)) - np.log(t))

    res = least_squares(
        resid,
        x0=[5e-6, 2e-6, 0.6, 0.0],
        x_scale=[1e-6, 1e-6, 0.1, 0.1],
        bounds=([0.0, 0.0, 0.01, -1.0], [1e-3, 1e-3, 1.0, 4.0]),
    )
    return np.asarray(res.x)


def main() -> None:
    data = load()
    by_kind: dict[str, list[dict[str, str]]] = defaultdict(list)
    for r in data:
        by_kind[r["link"]].append(r)
    for kind, rows in sorted(by_kind.items()):
        p = fit(rows)
        print(
            f"{kind}: latency_us={p[0] * 1e6:.2f} per_peer_us={p[1] * 1e6:.2f} "
            f"efficiency={p[2]:.3f} scaling={p[3]:.3f}"
        )
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for r in rows:
            pred = model(
                p,
                np.array([float(r["gpus"])]),
                np.array([2.0 * float(r["elements"])]),
                np.array([float(r["link_gb_s"]) * 1e9]),
            )[0]
            truth = float(r["latency_ms"]) * 1e-3
            groups[(r["system"], r["gpus"])].append(abs(pred - truth) / truth * 100.0)
        for (system, gpus), err in sorted(groups.items()):
            err.sort()
            p90 = err[min(int(0.9 * len(err)), len(err) - 1)]
            print(
                f"  {system:<22} n={gpus}  median {statistics.median(err):5.1f} %  p90 {p90:5.1f} %"
            )


if __name__ == "__main__":
    main()
