"""Speed of the replay engine: simulated requests and iterations per wall-clock second.

Prints JSON.  Uses the surrogate's operator model (Llama-3.1-8B on one H100) when the catalog
and surrogate are importable, otherwise a linear stand-in.  Load levels are fractions of the
replica's measured saturation throughput (closed loop at the batch limit).

    .venv/bin/python benchmarks/replay.py [--horizon 1800] [--quick] [--repeat 3]

``requests_per_wall_s`` times the engine (submit + advance, step-model cache warm-up
included); ``..._with_sampling`` adds drawing the requests.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from typing import Any

import attrs
import numpy as np

from koi.surrogate.replay import (
    ReplayEngine,
    ReplicaSpec,
    StepTime,
    batch_requests,
    run_closed_loop,
    sample_requests,
)
from koi.types import Config, LengthDist, Routing, WorkloadProfile


class _Linear:
    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        return StepTime(
            compute_s=2.5e-5 * prefill_tokens + 1e-9 * prefill_pairs + 2e-5 * decode_seqs,
            memory_s=0.006 + 6e-9 * decode_context_tokens,
            overhead_s=0.0015,
        )


def _replica() -> tuple[ReplicaSpec, str]:
    config = Config(max_batch_size=256, max_batched_tokens=8192)
    try:
        from koi.catalog import load_catalog
        from koi.surrogate import OperatorModel, feasibility

        cat = load_catalog()
        gpu, model = cat.gpus["H100-SXM"], cat.models["Llama-3.1-8B"]
        feas = feasibility(gpu, model, config)
        step = OperatorModel(gpu, model, config)
        spec = ReplicaSpec(step, feas.kv_capacity_tokens, 256, 8192)
        return spec, "OperatorModel(H100-SXM, Llama-3.1-8B, tp1)"
    except Exception:  # the benchmark also runs without the surrogate's operator model
        return ReplicaSpec(_Linear(), 400_000, 256, 8192), "linear stand-in"


def _workload(rate: float) -> WorkloadProfile:
    return WorkloadProfile(
        input_len=LengthDist(1000, 0.6, 8000),
        output_len=LengthDist(250, 0.6, 2000),
        rate_rps=rate,
    )


def _capacity_rps(spec: ReplicaSpec) -> float:
    reqs = batch_requests(_workload(1.0), np.random.default_rng(0), 50_000)
    w = run_closed_loop([spec], Routing.LEAST_LOADED, reqs, 256, 120.0, warmup_s=30.0)
    return w.request_throughput_rps


def _run(spec: ReplicaSpec, replicas: int, rate: float, horizon: float, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    reqs = sample_requests(_workload(rate), rng, 0.0, horizon)
    t1 = time.perf_counter()
    # A fresh step model per run, so every run pays its own cache warm-up.
    fresh = ReplicaSpec(copy.copy(spec.step_model), *attrs.astuple(spec, recurse=False)[1:])
    eng = ReplayEngine([fresh] * replicas, Routing.LEAST_LOADED)
    eng.submit(reqs)
    windows = []
    t = 0.0
    while t < horizon:  # 300 s windows, like the simulated fleet's planning ticks
        t = min(t + 300.0, horizon)
        windows.append(eng.advance(t))
    t2 = time.perf_counter()
    return reqs, eng, windows, t0, t1, t2


def _case(
    spec: ReplicaSpec, replicas: int, rate: float, horizon: float, seed: int, repeat: int
) -> Any:
    # Best of `repeat` runs: the machine is shared, the minimum is the engine's own cost.
    runs = [_run(spec, replicas, rate, horizon, seed) for _ in range(repeat)]
    reqs, eng, windows, t0, t1, t2 = min(runs, key=lambda r: r[5] - r[4])
    walls = sorted(r[5] - r[4] for r in runs)
    finished = sum(w.finished for w in windows)
    last = windows[-1]
    return {
        "replicas": replicas,
        "rate_rps": round(rate, 2),
        "requests": len(reqs),
        "finished": finished,
        "iterations": eng.iterations,
        "wall_s": round(t2 - t0, 3),
        "wall_s_all_runs": [round(w, 3) for w in walls],
        "requests_per_wall_s": round(len(reqs) / (t2 - t1)),
        "requests_per_wall_s_with_sampling": round(len(reqs) / (t2 - t0)),
        "iterations_per_wall_s": round(eng.iterations / (t2 - t1)),
        "last_window": {
            "p99_ttft_ms": round(last.p99_ttft_with_unserved_ms(), 1),
            "p99_tpot_ms": round(last.p99(last.tpot_ms), 2),
            "mean_batch_size": round(last.mean_batch_size, 1),
            "queue_depth": round(last.queue_depth, 1),
            "kv_cache_util": round(last.kv_cache_util, 3),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--horizon", type=float, default=1800.0, help="simulated seconds")
    parser.add_argument("--quick", action="store_true", help="300 s horizon")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is kept)")
    args = parser.parse_args()
    horizon = 300.0 if args.quick else args.horizon
    spec, name = _replica()
    cap = _capacity_rps(spec)
    cases = []
    for replicas in (1, 8):
        for label, load in (("light", 0.3), ("moderate", 0.7), ("heavy", 1.3)):
            res = _case(spec, replicas, load * cap * replicas, horizon, replicas, args.repeat)
            cases.append({"load": label, "utilisation_target": load, **res})
    print(
        json.dumps(
            {
                "benchmark": "replay",
                "step_model": name,
                "python": platform.python_version(),
                "horizon_s": horizon,
                "replica_capacity_rps": round(cap, 2),
                "cases": cases,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
