"""Every constant of the surrogate, in one frozen class (composed into ``KoiConfig`` later)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types.validators import fraction, non_negative, positive, positive_int

__all__ = ["Efficiency", "EngineProfile", "SurrogateConfig"]


@attrs.frozen
class Efficiency:
    """Achieved fractions of datasheet peaks for one GPU vendor (or one GPU, as an override).

    ``gemm`` is the large-GEMM tensor-core efficiency; ``gemm_half_tokens`` the token count at
    which a GEMM reaches half of it (small-M GEMMs under-fill the tensor cores).  ``attention``
    applies to attention FLOPs, ``memory`` to HBM streaming, ``link`` to collective bandwidth.
    """

    gemm: float = attrs.field(default=0.7, validator=fraction)
    gemm_half_tokens: float = attrs.field(default=64.0, validator=non_negative)
    attention: float = attrs.field(default=0.45, validator=fraction)
    memory: float = attrs.field(default=0.8, validator=fraction)
    link: float = attrs.field(default=0.7, validator=fraction)


@attrs.frozen
class EngineProfile:
    """What the surrogate knows of one serving engine.

    ``base_ms + per_seq_ms * seqs`` is the fixed CPU/launch cost of one iteration.
    ``mixed_prefill`` is the iteration scheduler: True when prefill slices share iterations
    with decodes (vLLM's chunked prefill, TensorRT-LLM's in-flight batching), False when a
    waiting prompt gets prefill-only iterations while decodes pause (SGLang without
    ``--enable-mixed-chunk``, its default).
    """

    base_ms: float = attrs.field(default=1.5, validator=non_negative)
    per_seq_ms: float = attrs.field(default=0.01, validator=non_negative)
    mixed_prefill: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))


def _efficiency_table(value: Any) -> tuple[tuple[str, Efficiency], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), v) for k, v in items))


def _engine_table(value: Any) -> tuple[tuple[str, EngineProfile], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), v) for k, v in items))


def _link_latency(value: Any) -> tuple[tuple[str, float], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), float(v)) for k, v in items))


# NVIDIA: engineering priors, checked on the fit split; AMD: grid-fitted on the fit split's
# MI300X rows (tests/surrogate/data/measurements.csv; docs/surrogate.md, "Constants").
_VENDORS = {
    "nvidia": Efficiency(gemm=0.62, gemm_half_tokens=48.0, attention=0.42, memory=0.82, link=0.7),
    "amd": Efficiency(gemm=0.35, gemm_half_tokens=96.0, attention=0.3, memory=0.55, link=0.6),
}
# Per-GPU overrides.  A100-80GB: memory and gemm grid-fitted on the fit split's A100 rows (NIM
# TRT-LLM, Llama-3-8B/70B); the other fields are the NVIDIA priors (docs/surrogate.md, "Constants").
_GPUS = {
    "A100-80GB": Efficiency(
        gemm=0.45, gemm_half_tokens=48.0, attention=0.42, memory=0.55, link=0.7
    ),
}
_ENGINES = {
    "vllm": EngineProfile(base_ms=1.2, per_seq_ms=0.012),
    "sglang": EngineProfile(base_ms=1.0, per_seq_ms=0.01, mixed_prefill=False),
    "trtllm": EngineProfile(base_ms=0.6, per_seq_ms=0.006),
}
# Per all-reduce latency (µs): NVLink/NVSwitch ~8 µs, Infinity Fabric ~12 µs, PCIe ~60 µs.
_LINK_LATENCY_US = {"nvlink": 8.0, "infinity_fabric": 12.0, "pcie": 60.0, "internode": 40.0}


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
        factory=lambda: _efficiency_table(_GPUS), converter=_efficiency_table
    )
    engines: tuple[tuple[str, EngineProfile], ...] = attrs.field(
        factory=lambda: _engine_table(_ENGINES), converter=_engine_table
    )
    default_engine: str = "vllm"
    link_latency_us: tuple[tuple[str, float], ...] = attrs.field(
        factory=lambda: _link_latency(_LINK_LATENCY_US), converter=_link_latency
    )
    # Memory (C2).
    gpu_memory_util: float = attrs.field(default=0.9, validator=fraction)
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
    int4_activations: bool = False
    # Closed loop with fixed lengths: weight of the lock-step limit (log-space blend with the
    # fully dispersed limit).  Chosen by inspection; see docs/surrogate.md, "Accuracy".
    closed_loop_sync_weight: float = attrs.field(default=0.5, validator=fraction)
    # Prediction.
    replay_horizon_s: float = attrs.field(default=30.0, validator=positive)
    replay_min_requests: int = attrs.field(default=300, validator=positive_int)
    replay_max_requests: int = attrs.field(default=1500, validator=positive_int)
    use_replay: bool = True
    # Ladders whose closed-form SLO margin is below this are clearly infeasible or overloaded:
    # they keep the screen's prediction and skip the replay (the "short list" rule).
    replay_min_margin: float = -0.5
    # A rank of n replicas is replayed with min(n, replay_max_replicas) replicas at the same
    # per-replica load (routing pools a few replicas; more add little and cost linearly).
    replay_max_replicas: int = attrs.field(default=2, validator=positive_int)
    # Per-replica request rates are snapped to a log grid of this relative step, so ranks that
    # recur across ladders with nearly the same share reuse one replay.
    rate_bucket: float = attrs.field(default=0.05, validator=fraction)
    min_slo_margin: float = attrs.field(default=-10.0)
    cache_size: int = attrs.field(default=65536, validator=positive_int)
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        if self.min_slo_margin >= 0:
            msg = f"min_slo_margin: must be < 0, got {self.min_slo_margin}"
            raise InvalidInput(msg)

    def efficiency_for(self, gpu: str, vendor: str) -> Efficiency:
        """The per-GPU override if any, else the vendor's, else the generic defaults."""
        table = dict(self.gpu_efficiency)
        if gpu in table:
            return table[gpu]
        return dict(self.efficiency).get(vendor.lower(), Efficiency())

    def engine_profile(self, engine: str) -> EngineProfile:
        table = dict(self.engines)
        return table.get(engine.lower(), table.get(self.default_engine, EngineProfile()))

    def link_latency_s(self, kind: str) -> float:
        return dict(self.link_latency_us).get(kind, 20.0) * 1e-6
