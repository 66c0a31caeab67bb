"""Surrogate speed: ladder predictions per second, cold and cached, printed as JSON.

    .venv/bin/python benchmarks/surrogate.py [--jobs 20] [--ladders 50] [--ticks 10]

Builds ``jobs`` online/batch jobs over catalog models and ``ladders`` candidate ladders each
(1-2 ranks drawn from a per-job pool of 8 chains over catalog environments with varied TP,
quantization and batch size, 1-4 replicas each, as a proposer builds them), then measures:
``screen_cold`` (closed form, empty cache), ``replay_cold`` (replay p99s, empty cache),
``cached`` (the same calls again) and ``amortized`` — a planner-like loop of ``ticks`` ticks
where each tick re-predicts every candidate, 10 % of the candidates are new ladders and one
job's request rate drifts by up to ±25 % (invalidating its predictions).
"""

from __future__ import annotations

import argparse
import json
import time

import attrs
import numpy as np

from koi.catalog import load_catalog
from koi.surrogate import Surrogate, SurrogateConfig
from koi.types import (
    Chain,
    Config,
    Environment,
    Job,
    Ladder,
    LengthDist,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

MODELS = [
    "Llama-3.1-8B",
    "Qwen3-8B",
    "Mistral-Small-24B",
    "Qwen3-32B",
    "Llama-3.1-70B",
    "Mixtral-8x7B",
    "Qwen3-30B-A3B",
]


def _jobs(n: int, rng: np.random.Generator) -> list[Job]:
    out = []
    for i in range(n):
        model = MODELS[i % len(MODELS)]
        isl, osl = float(rng.choice([300, 1000, 4000])), float(rng.choice([100, 300, 800]))
        if i % 4 == 3:
            w = WorkloadProfile(
                LengthDist(isl, 0.5, 32000),
                LengthDist(osl, 0.5, 4000),
                total_requests=int(rng.integers(1000, 20000)),
            )
            out.append(
                Job(
                    id=f"b{i}",
                    model=model,
                    job_class="batch",
                    workload=w,
                    target=ServingTarget.batch(deadline_s=7200),
                )
            )
        else:
            w = WorkloadProfile(
                LengthDist(isl, 0.5, 32000),
                LengthDist(osl, 0.5, 4000),
                rate_rps=float(rng.uniform(0.5, 20)),
            )
            out.append(
                Job(
                    id=f"o{i}",
                    model=model,
                    job_class="online",
                    workload=w,
                    target=ServingTarget.online(p99_ttft_ms=3000, p99_tpot_ms=100),
                )
            )
    return out


def _chains(job: Job, n: int, rng: np.random.Generator, envs: list[Environment]) -> list[Chain]:
    """A proposer-like pool of chains for one job (environment x config)."""
    out = []
    for _ in range(n):
        env = envs[int(rng.integers(len(envs)))]
        tp = int(rng.choice([t for t in (1, 2, 4, 8) if env.gpus_per_instance % t == 0]))
        cfg = Config(
            tp=tp,
            quant=str(rng.choice(["bf16", "fp8"])),
            max_batch_size=int(rng.choice([64, 128, 256])),
        )
        out.append(Chain(job.model, env, cfg))
    return out


def _ladder(pool: list[Chain], rng: np.random.Generator) -> Ladder:
    picks = rng.choice(len(pool), size=int(rng.integers(1, 3)), replace=False)
    return Ladder(tuple(Rank(pool[int(i)], int(rng.integers(1, 5))) for i in picks))


def _rate(sur: Surrogate, pairs: list[tuple[Job, Ladder]], *, screen: bool) -> float:
    t = time.perf_counter()
    for job, lad in pairs:
        (sur.screen if screen else sur.predict)(job, lad, now_s=0.0)
    return len(pairs) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--ladders", type=int, default=50)
    ap.add_argument("--ticks", type=int, default=20)
    a = ap.parse_args()
    cat = load_catalog()
    rng = np.random.default_rng(7)
    envs = [e for e in cat.environments(markets=["on_demand"]) if e.gpus_per_instance >= 1]
    jobs = _jobs(a.jobs, rng)
    pools = {j.id: _chains(j, 8, rng, envs) for j in jobs}
    pairs = [(j, _ladder(pools[j.id], rng)) for j in jobs for _ in range(a.ladders)]
    cfg = SurrogateConfig()
    screen_cold = _rate(Surrogate(cat.gpus, cat.models, cfg), pairs, screen=True)
    sur = Surrogate(cat.gpus, cat.models, cfg)
    replay_cold = _rate(sur, pairs, screen=False)
    cached = _rate(sur, pairs, screen=False)
    feasible = sum(sur.predict(j, lad).feasible for j, lad in pairs)
    # Planner-like loop: every tick re-predicts every candidate; 10 % of the candidates are
    # new ladders from the jobs' chain pools, and one job's request rate drifts each tick.
    sur = Surrogate(cat.gpus, cat.models, cfg)
    live = list(pairs)
    t0, calls = time.perf_counter(), 0
    for _tick in range(a.ticks):
        for _ in range(max(len(live) // 10, 1)):
            i = int(rng.integers(len(live)))
            j = live[i][0]
            live[i] = (j, _ladder(pools[j.id], rng))
        k = int(rng.integers(len(jobs)))
        drifted = jobs[k]
        if drifted.is_online:
            rate = (drifted.workload.rate_rps or 1.0) * float(rng.uniform(0.8, 1.25))
            new = attrs.evolve(drifted, workload=attrs.evolve(drifted.workload, rate_rps=rate))
            live = [(new if j.id == drifted.id else j, lad) for j, lad in live]
            jobs[k] = new
        for job, lad in live:
            sur.predict(job, lad)
            calls += 1
    amortized = calls / (time.perf_counter() - t0)
    print(
        json.dumps(
            {
                "ladders": len(pairs),
                "feasible_ladders": feasible,
                "screen_cold_per_s": round(screen_cold, 1),
                "replay_cold_per_s": round(replay_cold, 1),
                "cached_per_s": round(cached, 1),
                "amortized_per_s": round(amortized, 1),
                "amortized_calls": calls,
                "target_per_s": 1000,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
