"""Run planners over seeds of one scenario, in parallel processes, and collect the results."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TextIO

import attrs

from koi.errors import InvalidInput

__all__ = ["METRICS", "BenchResult", "aggregate", "run_bench", "run_one"]

#: Metrics reported per planner in ``results.json`` (means over seeds, plus per-seed values).
METRICS: tuple[str, ...] = (
    "composite",
    "quality",
    "coverage",
    "efficiency",
    "goodput_tok_s",
    "cost_per_slo_token_usd",
    "online_admission",
    "batch_admission",
    "batch_progress",
    "ttft_attainment",
    "tpot_attainment",
    "deadline_attainment",
    "swaps",
    "keeps",
    "rejected_actions",
    "plan_time_median_s",
    "plan_time_p95_s",
)


def run_one(
    scenario: str, planner: str, seed: int, out_dir: str | None = None, verbose: bool = False
) -> dict[str, Any]:
    """One planner, one seed: metrics, time series and calibration records (JSON-ready).

    With ``out_dir``, the full trace goes to ``out_dir/traces/<planner>-seed<seed>.json``.
    A module-level function so that worker processes can run it.
    """
    from koi.baselines import REFERENCE, make_policy
    from koi.catalog import load_catalog
    from koi.sim import build_world, run

    catalog = load_catalog()
    world = build_world(scenario, seed=seed) if planner in REFERENCE else None
    policy = make_policy(planner, catalog=catalog, seed=seed, world=world)
    result = run(scenario, policy, seed=seed, progress=sys.stderr if verbose else None)
    record = result.to_dict()
    record["planner"] = planner
    calibration = getattr(policy, "calibration", None)
    record["calibration"] = list(calibration) if calibration is not None else None
    if out_dir is not None:
        traces = Path(out_dir) / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        full = result.to_dict(with_trace=True)
        full["calibration"] = record["calibration"]
        path = traces / f"{planner}-seed{seed}.json"
        path.write_text(json.dumps(full, default=str))
    return record


@attrs.frozen
class BenchResult:
    """Every run of a benchmark and its per-planner summary (see :func:`aggregate`)."""

    scenario: str
    seeds: tuple[int, ...]
    planners: tuple[str, ...]
    runs: tuple[Mapping[str, Any], ...]
    summary: Mapping[str, Mapping[str, Any]]
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seeds": list(self.seeds),
            "planners": dict(self.summary),
            "wall_s": self.wall_s,
        }


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def aggregate(runs: Sequence[Mapping[str, Any]], planners: Sequence[str]) -> dict[str, Any]:
    """Per planner: the mean and spread (sample standard deviation; 0 for one seed) of every
    metric in :data:`METRICS` over its seeds, and the per-seed values.

    A non-finite value (a cost per SLO token with no SLO token) makes the mean ``None``.
    """
    from koi.baselines import REFERENCE, STOCHASTIC

    out: dict[str, Any] = {}
    for name in planners:
        mine = sorted((r for r in runs if r["planner"] == name), key=lambda r: r["seed"])
        if not mine:
            continue
        entry: dict[str, Any] = {
            "seeds": [r["seed"] for r in mine],
            "stochastic": name in STOCHASTIC,
            "reference": name in REFERENCE,
            "wall_s": sum(r["wall_s"] for r in mine),
        }
        spread: dict[str, float | None] = {}
        for metric in METRICS:
            vals = [r["metrics"][metric] for r in mine]
            if any(v is None or not math.isfinite(v) for v in vals):
                entry[metric], spread[metric] = None, None
                continue
            mean = sum(vals) / len(vals)
            var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else 0.0
            entry[metric] = mean
            spread[metric] = math.sqrt(var)
        entry["spread"] = spread
        entry["per_seed"] = [
            {"seed": r["seed"], **{m: r["metrics"][m] for m in METRICS}} for r in mine
        ]
        out[name] = entry
    return out


def _check_planners(planners: Sequence[str]) -> None:
    from koi.baselines import EXTRA_PLANNERS, LLM_PLANNERS, PLANNERS

    known = (*PLANNERS, *EXTRA_PLANNERS)
    for p in planners:
        if p in LLM_PLANNERS:
            raise InvalidInput(f"--planners: {p!r} needs an LLM plugin, none is configured")
        if p not in known:
            raise InvalidInput(f"--planners: unknown planner {p!r}; choose from {list(known)}")


def run_bench(
    scenario: str,
    planners: Sequence[str],
    *,
    seeds: int = 3,
    jobs: int | None = None,
    out_dir: str | Path | None = None,
    progress: TextIO | None = None,
    verbose: bool = False,
    worker: Callable[..., dict[str, Any]] = run_one,
) -> BenchResult:
    """Run every planner on seeds ``0 .. seeds-1`` of ``scenario``.

    Runs go to ``jobs`` worker processes (default: the CPU count; 1 runs in this process),
    the slowest planners (koi and its ablations) first.  ``progress`` gets a line per finished
    run; ``out_dir`` receives the traces.  Every planner runs every seed: the seed also draws
    the world (hardware truth, traffic, faults), so a deterministic planner's spread is the
    world's.
    """
    if seeds < 1:
        raise InvalidInput(f"seeds: must be >= 1, got {seeds}")
    _check_planners(planners)
    from koi.sim import load_scenario

    name = load_scenario(scenario).name  # fail early on a bad scenario
    out = str(out_dir) if out_dir is not None else None
    tasks = [(p, s) for p in planners for s in range(seeds)]
    tasks.sort(key=lambda t: ("koi" not in t[0], t[0] != "oracle"))
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []

    def done(rec: dict[str, Any]) -> None:
        runs.append(rec)
        if progress is not None:
            m = rec["metrics"]
            print(
                f"[bench {len(runs)}/{len(tasks)}] {rec['planner']} seed={rec['seed']} "
                f"composite={m['composite']:.1f} goodput={m['goodput_tok_s']:.0f} tok/s "
                f"wall={rec['wall_s']:.1f}s (elapsed {time.perf_counter() - t0:.0f}s)",
                file=progress,
                flush=True,
            )

    if workers <= 1 or len(tasks) == 1:
        for p, s in tasks:
            done(worker(scenario, p, s, out, verbose))
    else:
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
            futures = [pool.submit(worker, scenario, p, s, out, verbose) for p, s in tasks]
            for fut in as_completed(futures):
                done(fut.result())
    runs.sort(key=lambda r: (list(planners).index(r["planner"]), r["seed"]))
    return BenchResult(
        scenario=name,
        seeds=tuple(range(seeds)),
        planners=tuple(planners),
        runs=tuple(runs),
        summary=aggregate(runs, planners),
        wall_s=time.perf_counter() - t0,
    )
