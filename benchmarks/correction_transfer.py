"""How far a learned TPOT correction carries, measured on public measurements; JSON.

    .venv/bin/python benchmarks/correction_transfer.py [--split heldout|fit|all] [--replay]

koi learns a decode step factor where a job runs and uses it where it has not run: for the
same job at another replica count (another batch per replica), and lent to other jobs of the
model (other prompt lengths, other batches).  Whether that carries is a property of the world, so
it is measured here on tests/surrogate/data/measurements.csv, not on the simulated fleet.

For every row the implied factor is ``F = measured TPOT / predicted TPOT`` (the prior's
prediction, ``tests/_support/accuracy.py``).  For every ordered pair of rows of one deployment
(source as ``accuracy.py`` labels it, GPU, model, engine, TP, PP, precision), the factor of
the first is carried to the second three ways: whole (``F_j ≈ F_i``, what koi does),
shrunk (``ln F_j ≈ ρ · ln F_i``, ``ρ`` the least-squares fit of the bin) and not at all
(``F_j ≈ 1``, the prior).  Pairs are binned by how far apart they are in concurrency (the
batch) and in prompt length, both as ``|Δ ln|``; each bin reports its pairs, ``ρ`` and the
median ``|ln|`` error of each way.

``reach`` scores a factor that fades with the distance in batch instead: per reach ``r``,
``F^exp(-(Δ/r)²/2)`` at a batch ``Δ`` smaller in ln (whole at a larger one), the median error
of carrying each factor to the rows at other concurrencies, toward larger and smaller ones
apart, and of fading it both ways.  koi carries its decode factor whole (docs/benchmark.md,
"A decode correction that fades with the batch" says why).

``context_split`` tests one alternative to a whole factor: the factor split between the decode
step's context-free part and its part proportional to the context (the KV read), the split
that reproduces ``F_i`` with the least change from the prior at the first row's context share
``w_i``; reported over pairs whose shares differ by more than 0.2.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from tests._support.accuracy import predict_row, row_config, rows, source_label
from tests._support.specs import gpus, measured_models

from koi.surrogate import SurrogateConfig, select_step_model

#: |Δ ln| bins of concurrency and of prompt length.
BINS = ((0.0, 1.0), (1.0, 2.0), (2.0, math.inf))


class Point(NamedTuple):
    """One measured row: its implied factor, context share, prompt length and concurrency."""

    factor: float
    share: float
    isl: int
    conc: int


def context_share(row: dict[str, str], cfg: SurrogateConfig) -> float:
    """The share of the prior's decode step at the row's concurrency and mean context that is
    proportional to the context tokens."""
    conc = int(row["concurrency"])
    step, _ = select_step_model(
        gpus()[row["gpu"]], measured_models()[row["model"]], row_config(row),
        profiles=None, candidates=(), cfg=cfg,
    )  # fmt: skip
    ctx = int(conc * (int(row["isl"]) + int(row["osl"]) / 2))
    full = step.step(
        prefill_tokens=0, prefill_pairs=0.0, decode_seqs=conc, decode_context_tokens=ctx
    ).time_s
    free = step.step(
        prefill_tokens=0, prefill_pairs=0.0, decode_seqs=conc, decode_context_tokens=0
    ).time_s
    return min(max((full - free) / full, 0.0), 1.0) if full > 0 else 0.0


def points(split: str, *, replay: bool) -> dict[tuple[str, ...], list[Point]]:
    """The measured rows with a TPOT, grouped by deployment."""
    cfg = SurrogateConfig()
    out: dict[tuple[str, ...], list[Point]] = defaultdict(list)
    for r in rows(None if split == "all" else split):
        if not r["tpot_ms"]:
            continue
        p = predict_row(r, cfg, replay=replay)
        if p is None or not p["tpot_ms"] > 0:
            continue
        key = (source_label(r), *(r[k] for k in ("gpu", "model", "engine", "tp", "pp", "quant")))
        factor = float(r["tpot_ms"]) / p["tpot_ms"]
        out[key].append(Point(factor, context_share(r, cfg), int(r["isl"]), int(r["concurrency"])))
    return out


def split_factor(f: float, share: float, at: float) -> float:
    """``f`` learned at context share ``share``, split between the context-free and the
    context part with the least change from 1 that reproduces it, evaluated at share ``at``."""
    d, norm = f - 1.0, (1.0 - share) ** 2 + share**2
    free, ctx = 1.0 + d * (1.0 - share) / norm, 1.0 + d * share / norm
    return max((1.0 - at) * free + at * ctx, 1e-3)


def _median(v: list[float]) -> float:
    return round(statistics.median(v), 3) if v else math.nan


def transfer(groups: dict[tuple[str, ...], list[Point]]) -> list[dict[str, Any]]:
    """Per (concurrency, prompt length) distance bin: pairs, ρ and the three ways' errors."""
    # Every ordered pair once: (|Δ ln concurrency|, |Δ ln prompt|, ln F of each).
    every = [
        (abs(math.log(a.conc / b.conc)), abs(math.log(a.isl / b.isl)), math.log(a.factor),
         math.log(b.factor))
        for pts in groups.values()
        for a, b in itertools.permutations(pts, 2)
    ]  # fmt: skip
    out = []
    for (clo, chi), (ilo, ihi) in itertools.product(BINS, BINS):
        pairs = [(x, y) for dc, di, x, y in every if clo <= dc < chi and ilo <= di < ihi]
        if len(pairs) < 20:
            continue
        denom = sum(x * x for x, _ in pairs)
        rho = sum(x * y for x, y in pairs) / denom if denom else 0.0
        out.append(
            {
                "concurrency_dln": [clo, chi],
                "prompt_dln": [ilo, ihi],
                "pairs": len(pairs),
                "rho": round(rho, 2),
                "error_whole": _median([abs(y - x) for x, y in pairs]),
                "error_shrunk": _median([abs(y - rho * x) for x, y in pairs]),
                "error_prior": _median([abs(y) for _, y in pairs]),
            }
        )
    return out


#: The reaches :func:`reach` scores (``inf``: carried whole, as koi does).
REACHES = (0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, math.inf)


def faded(factor: float, batch: float, reach: float, seqs: float, *, both: bool) -> float:
    """A factor learned at ``batch`` sequences, carried to ``seqs``: ``factor^k`` with
    ``k = exp(-(ln(seqs / batch) / reach)² / 2)`` -- toward a smaller batch only (whole at
    a larger one) unless ``both``."""
    if seqs >= batch and not both:
        return factor
    x = math.log(seqs / batch) / reach
    return float(factor ** math.exp(-0.5 * x * x))


def reach(groups: dict[tuple[str, ...], list[Point]]) -> list[dict[str, Any]]:
    """Per reach ``r``, each factor faded toward smaller batches (:func:`faded`) and, as
    ``two_sided``, both ways: the median ``|ln|`` error over the pairs at different
    concurrencies, and apart over those carried to a larger and to a smaller one."""
    pairs = [
        (a, b)
        for pts in groups.values()
        for a, b in itertools.permutations(pts, 2)
        if a.conc != b.conc
    ]
    out = []
    for r in REACHES:
        every: list[float] = []
        up: list[float] = []
        down: list[float] = []
        both: list[float] = []
        for a, b in pairs:
            target = math.log(b.factor)
            error = abs(target - math.log(faded(a.factor, a.conc, r, b.conc, both=False)))
            every.append(error)
            (up if b.conc > a.conc else down).append(error)
            two = faded(a.factor, a.conc, r, b.conc, both=True)
            both.append(abs(target - math.log(two)))
        out.append(
            {
                "reach": r if math.isfinite(r) else "whole",
                "error": _median(every),
                "error_to_larger": _median(up),
                "error_to_smaller": _median(down),
                "error_two_sided": _median(both),
            }
        )
    return out


def context_split(groups: dict[tuple[str, ...], list[Point]]) -> dict[str, Any]:
    """Whole factor against the context split, over pairs whose shares differ by > 0.2."""
    whole: list[float] = []
    split: list[float] = []
    for pts in groups.values():
        for a, b in itertools.permutations(pts, 2):
            if abs(a.share - b.share) > 0.2:
                whole.append(abs(math.log(a.factor / b.factor)))
                split.append(abs(math.log(split_factor(a.factor, a.share, b.share) / b.factor)))
    better = sum(1 for w, s in zip(whole, split, strict=True) if s < w)
    return {
        "pairs": len(whole),
        "error_whole": _median(whole),
        "error_split": _median(split),
        "split_better_share": round(better / len(whole), 3) if whole else math.nan,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="heldout", choices=["fit", "heldout", "all"])
    ap.add_argument("--replay", action="store_true", help="predict with the replay")
    args = ap.parse_args()
    groups = points(args.split, replay=args.replay)
    print(
        json.dumps(
            {
                "split": args.split,
                "prediction": "replay" if args.replay else "screen",
                "rows": sum(len(p) for p in groups.values()),
                "deployments": len(groups),
                "transfer": transfer(groups),
                "reach": reach(groups),
                "context_split": context_split(groups),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
