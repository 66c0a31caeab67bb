"""Memory and feasibility of one chain: constraint C2 (DESIGN §9.2)."""

from __future__ import annotations

import attrs

from koi.surrogate._config import SurrogateConfig
from koi.surrogate._operator import model_parameters
from koi.types import Config, Environment, GpuSpec, ModelSpec

__all__ = ["Feasibility", "feasibility"]

_GIB = float(1 << 30)


@attrs.frozen
class Feasibility:
    """Whether a chain fits, and its memory budget per GPU.

    ``weights_gib`` and ``usable_gib`` are per GPU; ``kv_capacity_tokens`` counts context tokens
    the whole replica can hold in KV cache; ``max_seqs`` is the number of concurrent sequences
    of ``seq_tokens`` context each (capped by the config's max batch size).
    """

    ok: bool
    reason: str
    weights_gib: float
    usable_gib: float
    kv_capacity_tokens: int
    max_seqs: int
    memory_pressure: float = 0.0


def _weights_gib(model: ModelSpec, config: Config) -> float:
    p = model_parameters(model)
    # Embedding rows stay in BF16; every GEMM weight takes the quantized width.
    body = (p.stored - p.embedding) * config.quant.bytes_per_param + p.embedding * 2.0
    return body / (config.tp * config.pp) / _GIB


def kv_bytes_per_token_per_gpu(model: ModelSpec, config: Config, cfg: SurrogateConfig) -> float:
    """KV bytes one context token occupies on each GPU of the replica."""
    heads_per_gpu = max(model.kv_heads / config.tp, 1.0)  # replicated beyond kv_heads
    layers_per_gpu = model.layers / config.pp
    return 2.0 * layers_per_gpu * heads_per_gpu * model.head_dim * cfg.kv_bytes_per_value


def _topology_problem(
    gpu: GpuSpec, model: ModelSpec, config: Config, environment: Environment | None
) -> str | None:
    tp, pp = config.tp, config.pp
    if model.heads % tp:
        return f"tp {tp} does not divide {model.heads} attention heads"
    if model.kv_heads % tp and tp % model.kv_heads:
        return f"tp {tp} and {model.kv_heads} KV heads: neither divides the other"
    if pp > model.layers:
        return f"pp {pp} > {model.layers} layers"
    if environment is None:
        return None
    if environment.gpu != gpu.name:
        return f"environment GPU {environment.gpu} is not {gpu.name}"
    gpi, gpus = environment.gpus_per_instance, config.gpus
    if gpi % gpus and gpus % gpi:
        return f"{gpus} GPUs (tp {tp} x pp {pp}) neither divide nor fill {gpi}-GPU instances"
    if gpus > gpi and not environment.multi_node:
        return f"{gpus} GPUs > {gpi} per instance and the pool is not multi-node"
    if tp > min(gpu.gpus_per_node, gpi) and not environment.multi_node:
        return f"tp {tp} spans nodes and the pool is not multi-node"
    return None


def feasibility(
    gpu: GpuSpec,
    model: ModelSpec,
    config: Config,
    environment: Environment | None = None,
    *,
    cfg: SurrogateConfig | None = None,
    seq_tokens: int | None = None,
) -> Feasibility:
    """Constraint C2 for one chain: topology, then memory.

    Per GPU, with ``M`` its memory and ``u`` the engine's memory utilisation:

    .. math::

        usable = u M - A_{reserve} - a \\cdot max\\_batched\\_tokens,\\qquad
        KV = usable - W/(tp\\,pp)

    The chain fits when ``KV >= headroom * usable`` and the replica holds at least
    ``min_kv_tokens`` context tokens.  ``kv_capacity_tokens = KV / kv_per_token_per_gpu``.
    Never raises for an infeasible chain: ``ok`` is False and ``reason`` says why.
    """
    cfg = cfg or SurrogateConfig()
    seq = seq_tokens or cfg.reference_seq_tokens
    weights = _weights_gib(model, config)
    activ = cfg.activation_reserve_gib + (
        cfg.activation_bytes_per_token * model.hidden * config.max_batched_tokens / _GIB
    )
    usable = gpu.memory_gib * cfg.gpu_memory_util - activ
    pressure = (weights + activ) / gpu.memory_gib
    problem = _topology_problem(gpu, model, config, environment)
    if problem is not None:
        return Feasibility(
            ok=False,
            reason=problem,
            weights_gib=weights,
            usable_gib=usable,
            kv_capacity_tokens=0,
            max_seqs=0,
            memory_pressure=pressure,
        )
    kv_gib = usable - weights
    per_token = kv_bytes_per_token_per_gpu(model, config, cfg)
    kv_tokens = max(int(kv_gib * _GIB / per_token), 0)
    n = config.gpus
    if kv_gib < cfg.kv_headroom_frac * usable:
        reason = f"weights {weights * n:.0f} GiB > {n} × {usable:.0f} GiB usable"
        if kv_gib > 0:
            reason += f" less {cfg.kv_headroom_frac:.0%} KV headroom"
    elif kv_tokens < cfg.min_kv_tokens:
        reason = f"KV cache holds {kv_tokens} tokens < {cfg.min_kv_tokens} required"
    else:
        reason = ""
    if reason:
        return Feasibility(
            ok=False,
            reason=reason,
            weights_gib=weights,
            usable_gib=usable,
            kv_capacity_tokens=kv_tokens,
            max_seqs=0,
            memory_pressure=pressure,
        )
    max_seqs = max(min(config.max_batch_size, kv_tokens // seq), 1)
    return Feasibility(
        ok=True,
        reason="",
        weights_gib=weights,
        usable_gib=usable,
        kv_capacity_tokens=kv_tokens,
        max_seqs=max_seqs,
        memory_pressure=pressure,
    )
