"""Saturated capacity of one replica, and the truth's cheapest cost per token for a workload."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from koi.surrogate.replay import StepTimeModel
from koi.types import Chain, Config, GpuSpec, Job, ModelSpec, Pool, Quant, WorkloadProfile

__all__ = ["capacity_at_limits", "reference_cost_per_token", "replica_capacity"]


def replica_capacity(
    step: StepTimeModel, kv_capacity_tokens: int, config: Config, workload: WorkloadProfile
) -> tuple[float, float]:
    r"""(requests/s, output tokens/s) of one saturated replica on ``workload``'s mean shape.

    With ``B`` concurrent sequences (bounded by the batch cap and the KV cache), a decode
    iteration ``t_d(B)`` and one prompt's prefill ``t_p``, each request costs ``t_p`` of
    exclusive time plus ``out / B`` shared decode iterations:

    .. math:: \text{req/s} = 1 / (t_p + out \cdot t_d(B) / B)
    """
    return capacity_at_limits(
        step, kv_capacity_tokens, config.max_batch_size, config.max_batched_tokens, workload
    )


def capacity_at_limits(
    step: StepTimeModel,
    kv_capacity_tokens: int,
    max_batch_size: int,
    max_batched_tokens: int,
    workload: WorkloadProfile,
) -> tuple[float, float]:
    """:func:`replica_capacity` with the scheduler limits given directly (the only fields of
    the config it reads): the world asks with its engines' true limits without building a
    config for each chain."""
    inp = max(1.0, workload.input_len.mean)
    out = max(1.0, workload.output_len.mean)
    ctx = inp + out / 2.0
    cap = min(max_batch_size, max_batched_tokens, int(kv_capacity_tokens / ctx))
    b = max(1, cap)
    t_d = step.step(
        prefill_tokens=0, prefill_pairs=0.0, decode_seqs=b, decode_context_tokens=int(b * ctx)
    ).time_s
    chunk = max(1, min(int(inp), max_batched_tokens))
    chunks = inp / chunk
    t_c = step.step(
        prefill_tokens=chunk,
        prefill_pairs=chunk * (inp / 2.0),
        decode_seqs=0,
        decode_context_tokens=0,
    ).time_s
    t_p = chunks * t_c
    req_s = 1.0 / (t_p + out * t_d / b)
    return req_s, req_s * out


def reference_cost_per_token(
    jobs: Iterable[Job],
    pools: Iterable[Pool],
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
    capacity: Callable[[Chain, WorkloadProfile], float],
    *,
    duration_s: float,
) -> float:
    """Cheapest cost per output token over the fleet's chains, averaged over the offered mix.

    For each job, every pool of the fleet and every ``tp`` in 1, 2, 4, 8 with BF16 or FP8
    weights (those of the two the job accepts) that passes feasibility is priced at saturation
    (:func:`replica_capacity` under the truth); the job's cheapest USD per token is weighted by
    the output tokens it offers over the run (online: rate × time after arrival × mean output;
    batch: requests × mean output).
    ``capacity(chain, workload)`` is the truth's saturated output tokens/s of one replica.
    """
    from koi.surrogate import SurrogateConfig, feasibility

    sur = SurrogateConfig()  # the default, built once (feasibility builds one per call)
    pools = tuple(pools)
    total_tok = total_usd = 0.0
    # Keyed by the job's model and workload, not its id: jobs with the same model and
    # workload get the same chains and the same answers (fleet-xl: 300 jobs, 81 workloads).
    workloads: dict[tuple[str, WorkloadProfile], int] = {}
    cache: dict[tuple[int, str, str, str, Config], float] = {}
    feasible: dict[tuple[str, str, int, bool, Config], bool] = {}
    configs: dict[tuple[int, Quant], Config] = {}
    for job in jobs:
        model = models.get(job.model)
        if model is None:
            continue
        w = job.workload
        wid = workloads.setdefault((job.model, w), len(workloads))
        if job.is_online:
            tokens = (w.rate_rps or 0.0) * max(0.0, duration_s - job.arrival_s) * w.output_len.mean
        else:
            tokens = (w.total_requests or 0) * w.output_len.mean
        # BF16 and FP8 where the job accepts them; its own precisions if it accepts neither.
        quants = [q for q in (Quant.BF16, Quant.FP8) if job.accepts(q)] or list(job.precisions)
        best = float("inf")
        for pool in pools:
            gpu = gpus.get(pool.environment.gpu)
            if gpu is None:
                continue
            for tp in (1, 2, 4, 8):
                for quant in quants:
                    config = configs.get((tp, quant))
                    if config is None:
                        config = configs[tp, quant] = Config(tp=tp, quant=quant)
                    env = pool.environment
                    fkey = (model.name, gpu.name, env.gpus_per_instance, env.multi_node, config)
                    ok = feasible.get(fkey)
                    if ok is None:
                        ok = feasible[fkey] = feasibility(gpu, model, config, env, cfg=sur).ok
                    if not ok:
                        continue
                    key = (wid, gpu.name, env.cloud, env.instance_type, config)
                    tok_s = cache.get(key)
                    if tok_s is None:
                        tok_s = cache[key] = capacity(Chain(job.model, env, config), w)
                    if tok_s > 0:
                        usd_s = config.gpus * pool.environment.price_usd_per_gpu_h / 3600.0
                        best = min(best, usd_s / tok_s)
        if best < float("inf"):
            total_tok += tokens
            total_usd += tokens * best
    return total_usd / total_tok if total_tok > 0 else 0.0
