"""Structural checks every proposed ladder must pass before the planner scores it.

These are cheap, catalog-level checks (right model, known pool and GPU, fits the pool and the
node); the full feasibility test C2 (memory with KV cache, latency) is the surrogate's in S5.
"""

from __future__ import annotations

import json
from collections import Counter

from koi.candidates import ProposalContext
from koi.types import Job, Ladder, to_data

__all__ = ["ladder_key", "ladder_problems"]

_GIB = 2.0**30


def ladder_key(ladder: Ladder) -> str:
    """A canonical text key: equal ladders, and only those, get equal keys."""
    return json.dumps(to_data(ladder), sort_keys=True)


def ladder_problems(ladder: object, job: Job, context: ProposalContext) -> list[str]:
    """Every reason ``ladder`` cannot be a candidate for ``job``; empty when it can."""
    if not isinstance(ladder, Ladder):
        return [f"expected a Ladder, got {type(ladder).__name__}"]
    if ladder.is_empty:
        return ["empty ladder (the planner adds defer itself)"]
    problems: list[str] = []
    model = context.models.get(job.model)
    if model is None:
        problems.append(f"unknown model {job.model!r}")
    pools = {p.id: p for p in context.snapshot.pools}
    for k, rank in enumerate(ladder.ranks):
        where = f"ranks[{k}]"
        chain, env = rank.chain, rank.chain.environment
        if chain.model != job.model:
            problems.append(f"{where}.chain.model: {chain.model!r} is not the job's {job.model!r}")
        pool = pools.get(env.id)
        if pool is None:
            problems.append(f"{where}: unknown pool {env.id!r}")
        elif pool.environment != env:
            problems.append(f"{where}: environment differs from pool {env.id!r} in the snapshot")
        gpu = context.gpus.get(env.gpu)
        if gpu is None:
            problems.append(f"{where}: unknown GPU {env.gpu!r}")
            continue
        cfg = chain.config
        if cfg.tp > gpu.gpus_per_node:
            problems.append(f"{where}: tp={cfg.tp} exceeds {gpu.gpus_per_node} GPUs per node")
        if chain.gpus > env.gpus_per_instance and not env.multi_node:
            msg = f"{where}: {chain.gpus} GPUs per chain on a {env.gpus_per_instance}-GPU instance"
            problems.append(msg)
        if model is not None:
            # Weights only, evenly split over tp*pp; KV cache and activations come in S5.
            weights_gib = model.params_b * 1e9 * cfg.quant.bytes_per_param / _GIB / chain.gpus
            if weights_gib > gpu.memory_gib:
                msg = (
                    f"{where}: weights need {weights_gib:.1f} GiB per GPU, "
                    f"{gpu.name} has {gpu.memory_gib:g}"
                )
                problems.append(msg)
    use: Counter[str] = Counter()
    for rank in ladder.ranks:
        use[rank.chain.environment.id] += rank.gpus
    for pool_id, gpus in sorted(use.items()):
        pool = pools.get(pool_id)
        if pool is not None and gpus > pool.capacity_gpus:
            problems.append(f"pool {pool_id!r}: needs {gpus} GPUs, capacity {pool.capacity_gpus}")
    return problems
