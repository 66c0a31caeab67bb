"""Every constant of the surrogate, in one frozen class (composed into ``KoiConfig`` later)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from koi.errors import InvalidInput
from koi.types import Config
from koi.types.validators import (
    boolean,
    engine_name,
    finite,
    fraction,
    list_to_tuple,
    names,
    non_negative,
    non_negative_int,
    positive,
    positive_int,
)

__all__ = [
    "Collective",
    "Efficiency",
    "EngineProfile",
    "SurrogateConfig",
    "kv_bytes_per_value",
    "kv_cache_fp8",
]


@attrs.frozen
class Efficiency:
    """Achieved fractions of datasheet peaks for one GPU vendor (or one GPU, as an override).

    ``gemm`` is the large-GEMM tensor-core efficiency; ``gemm_half_tokens`` the token count at
    which a GEMM reaches half of it (small-M GEMMs under-fill the tensor cores).  ``attention``
    applies to attention FLOPs, ``memory`` to HBM streaming.  ``decode_attention_units`` is how
    many (sequence, KV head) pairs decode attention needs on one GPU to stream the KV cache at
    ``memory`` efficiency: each pair is one unit of kernel parallelism, so with fewer of them
    (small batch, few KV heads per GPU) the KV read runs at ``units / decode_attention_units`` of
    it; 0 turns the limit off.  ``allreduce_sync_us`` is a fixed cost per tensor-parallel
    all-reduce and per ``⌈log2 tp⌉`` on top of the link's collective latency (the engine's
    all-reduce kernel and the GPUs' synchronisation, as measured in serving rather than in NCCL
    tests).  ``fp8_gemm`` is the large-GEMM efficiency against the FP8 peak when the weights run
    on FP8 tensor cores (FP8, and INT4 as W4A8); 0 means ``gemm`` (GPUs whose FP8 kernels reach the
    same fraction of their FP8 peak as BF16 ones of theirs).  Collective bandwidth is per
    interconnect kind (:class:`Collective`).
    """

    gemm: float = attrs.field(default=0.7, validator=fraction)
    gemm_half_tokens: float = attrs.field(default=64.0, validator=non_negative)
    attention: float = attrs.field(default=0.45, validator=fraction)
    memory: float = attrs.field(default=0.8, validator=fraction)
    decode_attention_units: float = attrs.field(default=0.0, validator=non_negative)
    allreduce_sync_us: float = attrs.field(default=0.0, validator=non_negative)
    fp8_gemm: float = attrs.field(default=0.0, validator=fraction)


@attrs.frozen
class Collective:
    """All-reduce and send/recv cost over one kind of interconnect.

    An all-reduce of ``S`` bytes over ``n`` GPUs whose link carries ``B`` bytes/s per direction
    takes ``latency + per_peer·(n − 1) + per_doubling·⌈log2 n⌉
    + 2(n − 1)/n · S / (B · efficiency · (2/n)^scaling)``.
    ``scaling`` is how the bus bandwidth per GPU falls as more GPUs share one path: about 0
    on a switched fabric, near 2 when transfers are staged through host memory (PCIe without
    peer-to-peer).  A send/recv between two stages is the ``n = 2`` case without the reduction.
    """

    latency_us: float = attrs.field(default=8.0, validator=non_negative)
    per_peer_us: float = attrs.field(default=0.0, validator=non_negative)
    per_doubling_us: float = attrs.field(default=0.0, validator=non_negative)
    efficiency: float = attrs.field(default=0.7, validator=fraction)
    scaling: float = attrs.field(default=0.0)

    def allreduce_terms(self, n: int, link_bytes_s: float) -> tuple[float, float]:
        """(fixed seconds, seconds per byte) of one all-reduce over ``n`` GPUs."""
        if n <= 1:
            return 0.0, 0.0
        fixed = self._fixed_us(n) * 1e-6
        bw = link_bytes_s * self.efficiency * (2.0 / n) ** self.scaling
        return fixed, 2.0 * (n - 1) / n / bw

    def sendrecv_terms(self, link_bytes_s: float) -> tuple[float, float]:
        """(fixed seconds, seconds per byte) of one point-to-point transfer."""
        return self._fixed_us(2) * 1e-6, 1.0 / (link_bytes_s * self.efficiency)

    def _fixed_us(self, n: int) -> float:
        steps = math.ceil(math.log2(n)) if n > 1 else 0
        return self.latency_us + self.per_peer_us * (n - 1) + self.per_doubling_us * steps


@attrs.frozen
class EngineProfile:
    """What the surrogate knows of one serving engine.

    ``base_ms + per_seq_ms * seqs`` is the fixed CPU/launch cost of one iteration with CUDA
    graphs.  In eager mode every layer's kernels are launched from the CPU,
    ``eager_launch_us_per_layer`` per layer of the stage; the GPU runs behind the launches, so an
    eager iteration lasts at least that long (small-batch decode becomes launch-bound).
    ``graph_reserve_gib`` is the memory captured CUDA graphs hold; ``comm_reserve_gib`` what
    the communication library's buffers hold per GPU when ``tp·pp > 1``.  ``chunk_admission``
    is the KV admission policy (:class:`koi.surrogate.replay.ReplicaSpec`): vLLM admits a
    prompt when the slice it schedules fits.
    ``mixed_prefill`` is the iteration scheduler: True when prefill slices share iterations
    with decodes (vLLM's chunked prefill, TensorRT-LLM's in-flight batching), False when a
    waiting prompt gets prefill-only iterations while decodes pause (SGLang without
    ``--enable-mixed-chunk``, its default).
    """

    base_ms: float = attrs.field(default=1.5, validator=non_negative)
    per_seq_ms: float = attrs.field(default=0.01, validator=non_negative)
    mixed_prefill: bool = attrs.field(default=True, validator=boolean)
    chunk_admission: bool = attrs.field(default=False, validator=boolean)
    eager_launch_us_per_layer: float = attrs.field(default=120.0, validator=non_negative)
    graph_reserve_gib: float = attrs.field(default=0.5, validator=non_negative)
    comm_reserve_gib: float = attrs.field(default=0.4, validator=non_negative)
    # Bytes of HBM traffic per logit of each sampled token (logits, temperature, penalties,
    # softmax, top-k/top-p over the vocabulary): a per-sequence cost of every iteration that
    # grows with the vocabulary and is bandwidth-bound (docs/surrogate.md §7 "PCIe GPUs").
    sampling_bytes_per_logit: float = attrs.field(default=0.0, validator=non_negative)
    # Per-request latency outside the GPU iterations (HTTP frontend, tokenization, scheduling,
    # detokenized first chunk): added to every TTFT.  Fitted on the fit split (§7).
    request_floor_ms: float = attrs.field(default=0.0, validator=non_negative)
    # How the engine sizes its KV cache (docs/surrogate.md §7, "KV capacity per engine"):
    # "utilization" (vLLM: u·M − weights − profiled activations and graphs), "free_fraction"
    # (TensorRT-LLM: u of the memory left after weights and reserves), "static_fraction"
    # (SGLang: u·M holds weights and KV; activations and graphs live outside it).  ``u`` is
    # Config.gpu_memory_utilization.
    kv_memory_rule: str = attrs.field(
        default="utilization",
        validator=attrs.validators.in_(("utilization", "free_fraction", "static_fraction")),
    )
    # Whether an FP8 checkpoint brings an FP8 KV cache when the KV dtype is left at "auto":
    # TensorRT-LLM takes the checkpoint's KV quantisation when the checkpoint carries one (e.g.
    # ModelOpt's kv_cache_quant_algo FP8).  Off by default: whether a given FP8 checkpoint
    # carries it is per checkpoint, so set it, or Config.kv_cache_dtype="fp8", when it does.
    fp8_checkpoint_kv: bool = attrs.field(default=False, validator=boolean)
    # The GPU vendors (GpuSpec.vendor, lower case) the engine has builds for; empty: any.
    vendors: tuple[str, ...] = attrs.field(default=(), converter=list_to_tuple, validator=names)


T = TypeVar("T")


def _named(value: Any, name: str, kind: type[T]) -> tuple[tuple[str, T], ...]:
    """A mapping (or its items) of names to ``kind``, sorted by name; anything else is
    :class:`InvalidInput` naming ``name``."""
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError):
        msg = f"{name}: must map names to {kind.__name__}, got {value!r}"
        raise InvalidInput(msg) from None
    for k, v in pairs:
        if not isinstance(k, str) or not isinstance(v, kind):
            raise InvalidInput(f"{name}[{k!r}]: must be a {kind.__name__}, got {v!r}")
    return tuple(sorted(pairs))


def _efficiency_table(value: Any) -> tuple[tuple[str, Efficiency], ...]:
    return _named(value, "efficiency", Efficiency)


def _gpu_efficiency_table(value: Any) -> tuple[tuple[str, Efficiency], ...]:
    return _named(value, "gpu_efficiency", Efficiency)


def _engine_table(value: Any) -> tuple[tuple[str, EngineProfile], ...]:
    return _named(value, "engines", EngineProfile)


def _collective_table(value: Any) -> tuple[tuple[str, Collective], ...]:
    return _named(value, "collectives", Collective)


# NVIDIA: engineering priors, checked on the fit split; AMD: grid-fitted on the fit split's
# MI300X rows (tests/surrogate/data/measurements.csv; docs/surrogate.md, "Constants").
_VENDORS = {
    "nvidia": Efficiency(gemm=0.62, gemm_half_tokens=48.0, attention=0.42, memory=0.82),
    "amd": Efficiency(gemm=0.35, gemm_half_tokens=96.0, attention=0.3, memory=0.55),
}
# Per-GPU overrides.  A100-80GB: gemm grid-fitted on the fit split's A100 rows (NIM TRT-LLM,
# Llama-3-8B/70B); memory, the small-batch KV limit and the all-reduce sync cost fitted on its
# concurrency-1 rows (benchmarks/fit_decode.py); the rest are the NVIDIA priors
# (docs/surrogate.md, "Constants").  Other GPUs keep the priors until fit-split rows measure them.
# L40S: benchmarks/fit_ops.py's fit on measured vLLM 0.24.0 L40S kernels (aiconfigurator-core
# tables; docs/surrogate.md §7 "PCIe GPUs").  L4: the L40S's values (same Ada architecture; no
# L4 kernel tables exist), checked only by the fit split's six L4 serving rows.
_ADA = Efficiency(gemm=0.7, fp8_gemm=0.46, gemm_half_tokens=192.0, attention=0.5, memory=0.74)
_GPUS = {
    "L40S": _ADA,
    "L4": _ADA,
    "A100-80GB": Efficiency(
        gemm=0.45,
        gemm_half_tokens=48.0,
        attention=0.42,
        memory=0.82,
        decode_attention_units=40.0,
        allreduce_sync_us=12.0,
    ),
}
# trtllm base_ms: fitted on the fit split's concurrency-1 rows (benchmarks/fit_decode.py); vllm
# sampling_bytes_per_logit and request_floor_ms: fitted on the fit split's L4 rows
# (benchmarks/fit_vllm.py, benchmarks/fit_floor.py); the other engine costs are engineering
# estimates (no fit-split rows measure them).
_ENGINES = {
    "vllm": EngineProfile(
        base_ms=1.2,
        per_seq_ms=0.012,
        chunk_admission=True,
        sampling_bytes_per_logit=80.0,
        request_floor_ms=50.0,
    ),
    "sglang": EngineProfile(
        base_ms=1.0, per_seq_ms=0.01, mixed_prefill=False, kv_memory_rule="static_fraction"
    ),
    # TensorRT-LLM is built on CUDA and TensorRT: NVIDIA GPUs only (vLLM and SGLang have ROCm
    # builds).
    "trtllm": EngineProfile(
        base_ms=2.5, per_seq_ms=0.006, kv_memory_rule="free_fraction", vendors=("nvidia",)
    ),
}
# Collectives per interconnect kind.  pcie (peer-to-peer) and pcie_no_p2p: least-squares fit on
# aiconfigurator-core's measured NCCL all-reduce tables (benchmarks/fit_collectives.py,
# tests/surrogate/data/nccl_allreduce.csv; docs/surrogate.md, "Constants"): engines use NCCL on
# PCIe beyond two GPUs.  nvlink, infinity_fabric, internode: the earlier priors (serving engines
# run their own custom all-reduce on NVLink, which the NCCL tables do not measure).
_COLLECTIVES = {
    "nvlink": Collective(latency_us=0.0, per_doubling_us=8.0, efficiency=0.7),
    "pcie": Collective(latency_us=3.29, per_peer_us=3.57, efficiency=0.511, scaling=0.353),
    "pcie_no_p2p": Collective(latency_us=4.6, per_peer_us=2.5, efficiency=0.565, scaling=1.826),
    "infinity_fabric": Collective(latency_us=0.0, per_doubling_us=12.0, efficiency=0.6),
    "internode": Collective(latency_us=0.0, per_doubling_us=40.0, efficiency=0.7),
}


@attrs.frozen
class SurrogateConfig:
    """Constants of the operator model, the memory model and the predict API.

    Efficiencies come per GPU vendor (``efficiency``) with optional per-GPU overrides
    (``gpu_efficiency``); engine overheads per engine name with ``default_engine`` as fallback.
    """

    efficiency: tuple[tuple[str, Efficiency], ...] = attrs.field(
        factory=lambda: _efficiency_table(_VENDORS), converter=_efficiency_table
    )
    gpu_efficiency: tuple[tuple[str, Efficiency], ...] = attrs.field(
        factory=lambda: _gpu_efficiency_table(_GPUS), converter=_gpu_efficiency_table
    )
    engines: tuple[tuple[str, EngineProfile], ...] = attrs.field(
        factory=lambda: _engine_table(_ENGINES), converter=_engine_table
    )
    default_engine: str = attrs.field(default="vllm", validator=engine_name)
    collectives: tuple[tuple[str, Collective], ...] = attrs.field(
        factory=lambda: _collective_table(_COLLECTIVES), converter=_collective_table
    )
    # Memory (C2).  The engine's utilisation share is a deployment knob
    # (Config.gpu_memory_utilization); these are what its profile run finds besides weights.
    activation_reserve_gib: float = attrs.field(default=1.5, validator=non_negative)
    activation_bytes_per_token: float = attrs.field(default=16.0, validator=non_negative)
    kv_bytes_per_value: float = attrs.field(default=2.0, validator=positive)
    kv_headroom_frac: float = attrs.field(default=0.05, validator=fraction)
    min_kv_tokens: int = attrs.field(default=4096, validator=positive_int)
    reference_seq_tokens: int = attrs.field(default=2048, validator=positive_int)
    # Pipeline parallelism: stage imbalance share of the per-stage time.
    pp_imbalance: float = attrs.field(default=0.08, validator=fraction)
    # INT4 weights run W4A16 / W4A8 kernels in serving engines, not INT4 tensor-core math;
    # set True to credit the GPU's INT4 TFLOPS (W4A4 kernels).
    int4_activations: bool = attrs.field(default=False, validator=boolean)
    # Closed loop with fixed lengths: weight of the lock-step limit (log-space blend with the
    # fully dispersed limit).  Chosen by inspection; see docs/surrogate.md, "Accuracy".
    closed_loop_sync_weight: float = attrs.field(default=0.5, validator=fraction)
    # Prediction.
    replay_horizon_s: float = attrs.field(default=30.0, validator=positive)
    replay_min_requests: int = attrs.field(default=300, validator=positive_int)
    replay_max_requests: int = attrs.field(default=1500, validator=positive_int)
    use_replay: bool = attrs.field(default=True, validator=boolean)
    # The recompute collapse of chunk-admitting engines (docs/surrogate.md, "Recompute
    # collapse"): requests over which a replica must be unlikely to start one (the shortest
    # replay's), and the over-dispersion of the requests in a replica; fitted to the replay.
    collapse_requests: int = attrs.field(default=300, validator=positive_int)
    collapse_dispersion: float = attrs.field(default=6.0, validator=positive)
    # Ladders whose closed-form SLO margin is below this are clearly infeasible or overloaded:
    # they keep the screen's prediction and skip the replay (the "short list" rule).
    replay_min_margin: float = attrs.field(default=-0.5, validator=finite)
    # A rank of n replicas is replayed with min(n, replay_max_replicas) replicas at the same
    # per-replica load (routing pools a few replicas; more add little and cost linearly).
    replay_max_replicas: int = attrs.field(default=2, validator=positive_int)
    # Per-replica request rates are snapped to a log grid of this relative step, so ranks that
    # recur across ladders with nearly the same share reuse one replay.
    rate_bucket: float = attrs.field(default=0.05, validator=fraction)
    min_slo_margin: float = attrs.field(default=-10.0)
    cache_size: int = attrs.field(default=65536, validator=positive_int)
    # Tokens per KV block: engines reuse only whole blocks of a cached prefix (vLLM's default
    # --block-size 16; SGLang's radix cache reuses single tokens, so this is the coarser of the
    # two).
    prefix_block_tokens: int = attrs.field(default=16, validator=positive_int)
    seed: int = attrs.field(default=0, validator=non_negative_int)

    def __attrs_post_init__(self) -> None:
        if self.min_slo_margin >= 0:
            msg = f"min_slo_margin: must be < 0, got {self.min_slo_margin}"
            raise InvalidInput(msg)
        if self.replay_min_requests > self.replay_max_requests:
            msg = (
                f"replay_min_requests: must be <= replay_max_requests "
                f"({self.replay_max_requests}), got {self.replay_min_requests}"
            )
            raise InvalidInput(msg)

    def efficiency_for(self, gpu: str, vendor: str) -> Efficiency:
        """The per-GPU override if any, else the vendor's, else the generic defaults."""
        table = dict(self.gpu_efficiency)
        if gpu in table:
            return table[gpu]
        hit = dict(self.efficiency).get(vendor.lower())
        # The fallback is built only when needed: this runs in the closed form's inner loops.
        return hit if hit is not None else Efficiency()

    def engine_profile(self, engine: str) -> EngineProfile:
        table = dict(self.engines)
        hit = table.get(engine.lower())
        if hit is None:
            hit = table.get(self.default_engine)
        return hit if hit is not None else EngineProfile()

    def collective(self, kind: str) -> Collective:
        """The collective model of an interconnect kind (``LinkKind`` value or ``internode``)."""
        table = dict(self.collectives)
        hit = table.get(kind)
        if hit is None:
            hit = table.get("internode")
        return hit if hit is not None else Collective()


def kv_cache_fp8(config: Config, cfg: SurrogateConfig) -> bool:
    """Whether the engine keeps an FP8 KV cache: asked for (``kv_cache_dtype="fp8"``), or left at
    ``"auto"`` with an FP8 checkpoint on an engine that takes the checkpoint's KV dtype."""
    if config.kv_cache_dtype == "fp8":
        return True
    return (
        config.kv_cache_dtype == "auto"
        and config.quant.value == "fp8"
        and cfg.engine_profile(config.engine).fp8_checkpoint_kv
    )


def kv_bytes_per_value(config: Config, cfg: SurrogateConfig) -> float:
    """Bytes of one cached key or value element: 1 with an FP8 KV cache, else ``cfg``'s."""
    return 1.0 if kv_cache_fp8(config, cfg) else cfg.kv_bytes_per_value
