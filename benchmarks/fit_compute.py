"""Fit one GPU override's compute efficiencies on the fit split's rows of that GPU, as JSON.

    .venv/bin/python benchmarks/fit_compute.py [--gpu H100-SXM]

Grid search over the override's ``gemm`` and ``attention`` efficiencies (the large-GEMM and
attention-FLOP fractions of peak: prefill, and decode at large batch), minimising the sum of
the median absolute percentage errors of TTFT, TPOT and throughput over every fit-split row of
the GPU from the NVIDIA DLI ``nim.csv`` (each row with its protocol, replay).  The decode
terms (``benchmarks/fit_decode.py``) stay as configured; overrides that share the GPU's
generation (``fit_decode.GENERATIONS``) are set together.  Held-out rows are never read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tests._support.accuracy import METRICS, predict_row, rows

from fit_decode import GENERATIONS
from koi.surrogate import SurrogateConfig

GEMM = [0.35, 0.45, 0.55, 0.62]
ATTENTION = [0.3, 0.42]


def medians(data: list[dict[str, str]], cfg: SurrogateConfig) -> dict[str, float]:
    ape: dict[str, list[float]] = {m: [] for m in METRICS}
    for r in data:
        p = predict_row(r, cfg)
        if p is None:
            continue
        for m in METRICS:
            ape[m].append(abs(p[m] - float(r[m])) / float(r[m]) * 100.0)
    return {m: round(statistics.median(v), 1) for m, v in ape.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="H100-SXM", choices=sorted(GENERATIONS))
    args = ap.parse_args()
    base = SurrogateConfig()
    data = [r for r in rows("fit") if r["gpu"] == args.gpu and "nim.csv" in r["source"]]
    current = base.efficiency_for(args.gpu, "nvidia")

    def configured(gemm: float, attention: float) -> SurrogateConfig:
        eff = attrs.evolve(current, gemm=gemm, attention=attention)
        table = dict(base.gpu_efficiency) | dict.fromkeys(GENERATIONS[args.gpu], eff)
        return attrs.evolve(base, gpu_efficiency=table)

    scored = {p: medians(data, configured(*p)) for p in itertools.product(GEMM, ATTENTION)}
    best = min(scored, key=lambda p: sum(scored[p].values()))
    out = {
        "gpu": args.gpu,
        "rows": len(data),
        "gemm": best[0],
        "attention": best[1],
        "median_ape": scored[best],
        "grid": {f"gemm {g} attention {a}": v for (g, a), v in scored.items()},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
