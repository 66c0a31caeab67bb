"""The closed form's stable rate against the replay's, for chunk-admitting replicas.

    .venv/bin/python benchmarks/collapse.py [--quick]

A vLLM replica admits a prompt once its first slice fits; with more long prompts in it than
its KV cache can finish, they evict each other and throughput collapses (docs/surrogate.md,
"Recompute collapse").  For every (model, prompt, output, GPU, TP) of a grid where that can
happen, this prints one JSON line: the closed form's capacity without the collapse term
(``collapse_requests = 1``: never unstable), with it, and the share of the former the replay
sustains (the largest load, by bisection, at which one replica finishes at least 90 % of the
output tokens sent over the replay's window).  The last line is the summary: the median and
mean absolute error of the closed form's stable share against the replay's, both capped at
1, overall and by how many requests the cache holds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from typing import Any

import attrs
import numpy as np

from koi.catalog import load_catalog
from koi.sim import load_scenario
from koi.surrogate import Surrogate, SurrogateConfig, feasibility, replay_horizon
from koi.surrogate import replay as engine
from koi.types import Chain, Config, Job, LengthDist, Quant, Routing


def _job(model: str, inp: int, out: int) -> Job:
    base = next(j for j in load_scenario("hetero-3h").jobs if j.id == "summ-qwen32b")
    w = attrs.evolve(
        base.workload,
        input_len=LengthDist(inp, 0.3, int(1.6 * inp)),
        output_len=LengthDist(out, 0.4, 4 * out),
    )
    return attrs.evolve(base, model=model, workload=w)


def _sustained(sur: Surrogate, job: Job, chain: Chain, kv: int, cap_tok_s: float) -> float:
    """The largest share of ``cap_tok_s`` one replica (``kv`` tokens of KV cache) keeps up
    with in the replay."""
    cfg, config, w = sur.cfg, chain.config, job.workload
    step, _ = sur.step_model(sur.gpus[chain.environment.gpu], sur.models[job.model], config)
    spec = engine.ReplicaSpec(
        step_model=step,
        kv_capacity_tokens=kv,
        max_batch_size=config.max_batch_size,
        max_batched_tokens=config.max_batched_tokens,
        chunk_admission=cfg.engine_profile(config.engine).chunk_admission,
    )

    def keeps_up(share: float) -> bool:
        rate = share * cap_tok_s / w.output_len.mean
        horizon = replay_horizon(rate, cfg)
        eng = engine.ReplayEngine([spec], Routing.ROUND_ROBIN)
        sent = engine.sample_requests(
            attrs.evolve(w, rate_rps=rate), np.random.default_rng(0), 0.0, 1.2 * horizon
        )
        eng.submit(sent)
        eng.advance(0.2 * horizon)
        stats = eng.advance(1.2 * horizon)
        window = sum(r.output_tokens for r in sent if 0.2 * horizon <= r.arrival_s < 1.2 * horizon)
        return stats.output_tokens_generated >= 0.9 * window

    lo, hi = 0.0, 1.4
    for _ in range(7):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if keeps_up(mid) else (lo, mid)
    return lo


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one model, two prompts")
    args = ap.parse_args(argv)
    cat = load_catalog()
    models = ["Qwen3-32B"] if args.quick else ["Llama-3.1-8B", "Qwen3-32B", "Llama-3.1-70B"]
    prompts = [10_000, 20_000] if args.quick else [10_000, 16_000, 20_000, 32_000]
    envs = {}
    for env in cat.environments(gpus=["H100-SXM", "L40S", "MI300X"]):
        if env.gpus_per_instance == 8 and env.gpu not in envs:
            envs[env.gpu] = env
    with_term = Surrogate(cat.gpus, cat.models)
    without = Surrogate(cat.gpus, cat.models, cfg=SurrogateConfig(collapse_requests=1))
    rows: list[dict[str, Any]] = []
    grid = itertools.product(models, prompts, [200, 800], sorted(envs), [1, 2, 4])
    for model, inp, out, gpu, tp in grid:
        job, chain = _job(model, inp, out), Chain(model, envs[gpu], Config(tp=tp, quant=Quant.FP8))
        raw = without.capacity(job, chain)
        if raw is None or raw <= 0:
            continue
        stable = with_term.capacity(job, chain) or 0.0
        config = chain.config
        kv = feasibility(
            cat.gpus[gpu], cat.models[model], config, cfg=with_term.cfg, seq_tokens=inp + out
        ).kv_capacity_tokens
        n_fit = kv / (inp + out)
        budget = config.max_batched_tokens
        if inp <= budget or min(config.max_batch_size, kv / budget) <= n_fit:
            continue  # no collapse to model: one-slice prompts, or a cache admitting no more
        row = {
            "model": model,
            "input": inp,
            "output": out,
            "gpu": gpu,
            "tp": tp,
            "requests_in_cache": round(n_fit, 1),
            "saturation_tok_s": round(raw, 1),
            "stable_tok_s": round(stable, 1),
            "closed_form_share": round(stable / raw, 3),
            "replay_share": round(_sustained(with_term, job, chain, kv, raw), 3),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)

    def summary(sel: list[dict[str, Any]]) -> dict[str, float]:
        err = [min(r["closed_form_share"], 1.0) - min(r["replay_share"], 1.0) for r in sel]
        return {
            "rows": len(err),
            "median_error": round(statistics.median(err), 3) if err else math.nan,
            "mean_abs_error": round(sum(map(abs, err)) / len(err), 3) if err else math.nan,
        }

    bands = {"<12": (0, 12), "12-30": (12, 30), "30-60": (30, 60), ">=60": (60, math.inf)}
    out_rows: dict[str, object] = {"all": summary(rows)}
    for name, (lo, hi) in bands.items():
        out_rows[f"requests_in_cache {name}"] = summary(
            [r for r in rows if lo <= r["requests_in_cache"] < hi]
        )
    print(json.dumps({"summary": out_rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
