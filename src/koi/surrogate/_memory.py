"""Memory and feasibility of one chain: constraint C2 (DESIGN §9.2)."""

from __future__ import annotations

import attrs

from koi.surrogate._config import SurrogateConfig, kv_bytes_per_value
from koi.surrogate._operator import model_parameters
from koi.types import Config, Environment, GpuSpec, ModelSpec

__all__ = ["Feasibility", "feasibility", "iteration_tokens", "node_gpu"]

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
    return 2.0 * layers_per_gpu * heads_per_gpu * model.head_dim * kv_bytes_per_value(config, cfg)


def node_gpu(gpu: GpuSpec, environment: Environment | None) -> GpuSpec:
    """``gpu`` as installed in ``environment``: the instance's interconnect replaces the GPU's
    catalog link where the instance names one (PCIe without peer-to-peer, another PCIe
    generation)."""
    if environment is None or (environment.link is None and environment.link_gb_s is None):
        return gpu
    return attrs.evolve(
        gpu,
        link=gpu.link if environment.link is None else environment.link,
        link_gb_s=gpu.link_gb_s if environment.link_gb_s is None else environment.link_gb_s,
    )


def iteration_tokens(config: Config, longest_prompt: int) -> int:
    """Tokens one iteration may carry: ``max_batched_tokens``; without chunked prefill a whole
    prompt must fit in one iteration, so at least the longest prompt."""
    if config.chunked_prefill:
        return config.max_batched_tokens
    return max(config.max_batched_tokens, longest_prompt)


def reserve_gib(model: ModelSpec, config: Config, cfg: SurrogateConfig) -> float:
    """Memory per GPU the engine's profile run finds besides weights and KV cache.

    A fixed activation reserve, the activations of the largest iteration (``max_batched_tokens``,
    or a whole ``max_model_len`` prompt without chunked prefill), captured CUDA graphs (none in
    eager mode) and, with more than one GPU, the communication library's buffers.
    """
    ov = cfg.engine_profile(config.engine)
    step_tokens = iteration_tokens(config, config.max_model_len or 0)
    act = cfg.activation_bytes_per_token * model.hidden * step_tokens / _GIB
    graphs = ov.graph_reserve_gib if config.cuda_graphs else 0.0
    comm = ov.comm_reserve_gib if config.gpus > 1 else 0.0
    return cfg.activation_reserve_gib + act + graphs + comm


def _usable_gib(
    memory: float, weights: float, reserve: float, config: Config, cfg: SurrogateConfig
) -> float:
    """Memory per GPU for weights and KV cache, the way the engine sizes its pool."""
    u = config.gpu_memory_utilization
    rule = cfg.engine_profile(config.engine).kv_memory_rule
    if rule == "free_fraction":
        # KV = u · (M − W − R): TensorRT-LLM's free_gpu_memory_fraction of what is left.
        return weights + u * max(memory - weights - reserve, 0.0)
    if rule == "static_fraction":
        # KV = u·M − W: SGLang's mem_fraction_static pool holds weights and KV only.
        return memory * u
    return memory * u - reserve


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
    max_request_tokens: int | None = None,
) -> Feasibility:
    """Constraint C2 for one chain: the engine's platform, topology, then memory.

    An engine runs only on the GPU vendors its profile lists (``EngineProfile.vendors``;
    TensorRT-LLM: NVIDIA).

    Per GPU, with ``M`` the memory the device reports and ``u`` the engine's memory utilisation
    (``config.gpu_memory_utilization``), ``R`` the reserves of :func:`reserve_gib` and ``W``
    the weights per GPU, the KV pool is the engine's (``EngineProfile.kv_memory_rule``):
    vLLM ``u M − R − W``, TensorRT-LLM ``u (M − W − R)``, SGLang ``u M − W``; ``usable`` is
    that pool plus the weights.

    The chain fits when ``KV >= headroom * usable``, the replica holds at least
    ``min_kv_tokens`` context tokens and one request of the maximum model length: the
    config's ``max_model_len``, else ``max_request_tokens`` (the longest request the job
    sends); the engine refuses to start otherwise.  ``kv_capacity_tokens = KV /
    kv_per_token_per_gpu``.
    Never raises for an infeasible chain: ``ok`` is False and ``reason`` says why.
    """
    cfg = cfg or SurrogateConfig()
    seq = seq_tokens or cfg.reference_seq_tokens
    weights = _weights_gib(model, config)
    activ = reserve_gib(model, config, cfg)
    memory = gpu.device_memory_gib
    usable = _usable_gib(memory, weights, activ, config, cfg)
    pressure = (weights + activ) / memory
    vendors = cfg.engine_profile(config.engine).vendors
    if vendors and gpu.vendor.lower() not in vendors:
        problem: str | None = (
            f"{config.engine} runs on {' or '.join(vendors)} GPUs, not on {gpu.name} ({gpu.vendor})"
        )
    else:
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
    elif (
        config.max_model_len is not None
        and max_request_tokens is not None
        and config.max_model_len < max_request_tokens
    ):
        reason = (
            f"max_model_len {config.max_model_len} < requests of up to {max_request_tokens} "
            "tokens (the engine rejects them)"
        )
    elif kv_tokens < (max_len := config.max_model_len or max_request_tokens or 0):
        reason = (
            f"KV cache holds {kv_tokens} tokens < one request of max model length {max_len} "
            "(the engine refuses to start)"
        )
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
