"""Every constant of the simulated fleet, in frozen attrs config classes.

The lead composes :class:`SimConfig` into the global ``KoiConfig``; nothing in ``koi.sim`` reads
a constant from anywhere else.  The ranges are documented in ``docs/evaluation.md``.
"""

from __future__ import annotations

import attrs

from koi.errors import InvalidInput
from koi.types.validators import fraction, non_negative, positive, positive_int

__all__ = ["HardwareConfig", "LaunchConfig", "SamplingConfig", "SimConfig", "TruthConfig"]


def _range(_inst: object, attribute: attrs.Attribute[tuple[float, float]], value: object) -> None:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) for v in value)
        or not 0 <= value[0] <= value[1]
    ):
        raise InvalidInput(f"{attribute.name}: must be a (low, high) pair with 0 <= low <= high")


@attrs.frozen
class TruthConfig:
    """How the synthetic world's truth differs from the surrogate's prior (``world =
    "synthetic"``); ``driver_update_error`` and ``prefix_zipf`` also apply to the measured world.

    Each factor multiplies one :class:`~koi.surrogate.replay.StepTime` component.  A relative
    error ``m`` is drawn uniformly from a ``*_error`` range; with probability ``slow_bias`` the
    truth is slower than the prior (factor ``1 + m``), otherwise faster (``1 / (1 + m)``) —
    rooflines are optimistic more often than not.  Collective communication over PCIe is drawn
    from ``pcie_comm_tp8``, a range of multipliers at TP=8, scaled by ``log2(tp) / 3`` toward 1
    at lower TP.  ``prefix_zipf`` is how unevenly a job's shared prompt prefixes are used
    (hidden from the planners, like the rest).
    """

    compute_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    memory_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    comm_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    pcie_comm_tp8: tuple[float, float] = attrs.field(default=(2.0, 4.5), validator=_range)
    bubble_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    overhead_error: tuple[float, float] = attrs.field(default=(0.10, 0.50), validator=_range)
    slow_bias: float = attrs.field(default=0.7, validator=fraction)
    step_noise_cv: float = attrs.field(default=0.05, validator=non_negative)
    driver_update_error: tuple[float, float] = attrs.field(default=(0.10, 0.30), validator=_range)
    # Prefix popularity: the k-th most used of a job's shared prefixes is drawn with weight
    # 1/k^s (Zipf).  The surrogate assumes equally popular prefixes; skew makes an LRU prefix
    # cache hit more often than that under pressure.
    prefix_zipf: float = attrs.field(default=0.8, validator=non_negative)


def _prob(_inst: object, attribute: attrs.Attribute[float], value: object) -> None:
    fraction(_inst, attribute, value)


@attrs.frozen
class HardwareConfig:
    """Ranges of the measured world's hidden structural differences (docs/evaluation.md).

    Every quantity is drawn per seed (and per the key named below) uniformly from its range,
    and never shown to a planner.

    Memory and KV capacity, per GPU and instance type: ``vram_reserve`` of the catalog VRAM is
    never usable (driver, ECC, CUDA context, virtualisation, fragmentation); per deployment
    (engine × model): the memory utilisation it really ends up with when 0.9 is asked
    (``mem_util``: the engine's profile run misjudges its peak; the offset applies to whatever
    ``Config.gpu_memory_utilization`` asks) and the CUDA-graph memory pool
    (``graph_pool_gib``).  A replica whose KV cache would hold fewer than ``min_kv_tokens``
    tokens (or one ``max_model_len`` request) fails to start (out of memory at engine
    start-up) and never materializes.

    Scheduler, per deployment (engine × model: the team serving a model sets its flags): the
    share of the planned ``max_batch_size`` the deployment really admits (``seqs_scale``: one
    of the listed values with the listed probabilities) and the factor on
    ``max_batched_tokens`` (``tokens_scale``); SGLang runs with mixed chunked prefill with
    probability ``sglang_mixed_prob``; eager mode (no CUDA graphs) although graphs were asked
    for with probability ``eager_prob``; otherwise decode batches are padded up to the next
    CUDA-graph capture size (1, 2, 4, then multiples of 8 up to ``capture_max``, one of the
    listed values) and larger batches run piecewise; sampling over the vocabulary (top-p
    sorts, penalties) costs ``sample_ns_per_logit`` per logit of each sampling sequence at
    H100 bandwidth.  Per-iteration CPU overhead per engine: ``base_ms`` (times 1 for vLLM, 0.8
    for SGLang, 0.5 for TensorRT-LLM) plus ``per_seq_us`` per running sequence; eager kernels
    cost ``launch_us`` each; all of it times the instance type's host CPU factor
    (``host_cpu``, per cloud × instance type: host CPUs of different generations and clocks).

    Checkpoints, per model: FP8 weights carry block-wise scales with probability
    ``fp8_blockwise_prob``, which costs ``fp8_blockwise_cost`` times the compute-bound share of
    every FP8 GEMM.  An FP8 KV cache (asked for, or TensorRT-LLM on an FP8 checkpoint) halves
    KV bytes; its decode attention reads ``fp8_kv_read`` of the BF16 time per context token
    (per engine: fewer bytes, plus the dequantization).

    Interconnect, per PCIe instance type with more than one GPU: no peer-to-peer when the
    catalog says so (``pcie_no_p2p``), and with probability ``no_p2p_prob`` where it says the
    node has it (virtualised or ACS-enabled hosts); without it, collectives are staged through
    host memory at ``host_gb_s`` of bus bandwidth for two GPUs (falling as ``g^-1.8`` with the
    ``g`` GPUs staging at once), ``host_hop_us`` per ring step, and engines fall back from
    custom all-reduce to NCCL.  Both ranges are calibrated to the measured L40S NCCL table;
    host bandwidth and hop time are hidden either way.

    Efficiency: per model (not model class) a log-normal factor of sigma ``model_sigma``; per
    GPU and instance type a sustained-clock factor of sigma ``clock_sigma`` (chassis power cap
    and cooling); per (GPU, engine, model, dtype) a log-normal kernel-tuning factor of sigma
    ``tuning_sigma`` on GEMM time; per (GPU, engine) a skew of ``collective_skew_us`` per
    all-reduce per doubling of TP (each collective waits for its slowest rank); per (GPU,
    engine, model) a batch slope ``batch_slope`` (d ln time / d log2 batch of decode steps
    around 16 sequences) and a factor ``context_scale`` on the context-proportional part of
    attention (the deployment's attention backend against the measured one); per seed the
    share of pipeline stages that do not overlap (``pp_loss``).

    Overlap, per deployment: the scheduler prepares the next iteration while the GPU runs this
    one with probability ``vllm_overlap_prob`` (vLLM) or ``overlap_prob`` (SGLang, TensorRT-LLM);
    then only the CPU time that outlasts the step's context-free GPU work shows, and at least
    the share ``overlap_exposed`` (per engine: sync points).

    Overload collapse: each preempted sequence stalls its replica ``preempt_ms`` plus its KV
    tokens at ``preempt_gb_s`` (block-table churn and re-admission), on top of the recompute.
    """

    vram_reserve: tuple[float, float] = attrs.field(default=(0.03, 0.08), validator=_range)
    mem_util: tuple[float, float] = attrs.field(default=(0.84, 0.92), validator=_range)
    graph_pool_gib: tuple[float, float] = attrs.field(default=(0.3, 1.5), validator=_range)
    min_kv_tokens: int = attrs.field(default=512, validator=positive_int)
    seqs_scale: tuple[float, ...] = (0.5, 0.75, 1.0)
    seqs_scale_p: tuple[float, ...] = (0.25, 0.25, 0.5)
    tokens_scale: tuple[float, ...] = (0.5, 1.0, 2.0)
    tokens_scale_p: tuple[float, ...] = (0.3, 0.5, 0.2)
    sglang_mixed_prob: float = attrs.field(default=0.3, validator=_prob)
    eager_prob: float = attrs.field(default=0.08, validator=_prob)
    capture_max: tuple[int, ...] = (256, 512)
    base_ms: tuple[float, float] = attrs.field(default=(0.5, 2.0), validator=_range)
    per_seq_us: tuple[float, float] = attrs.field(default=(2.0, 12.0), validator=_range)
    launch_us: tuple[float, float] = attrs.field(default=(3.0, 6.0), validator=_range)
    no_p2p_prob: float = attrs.field(default=0.5, validator=_prob)
    host_gb_s: tuple[float, float] = attrs.field(default=(12.0, 24.0), validator=_range)
    host_hop_us: tuple[float, float] = attrs.field(default=(1.5, 4.0), validator=_range)
    model_sigma: float = attrs.field(default=0.2, validator=non_negative)
    clock_sigma: float = attrs.field(default=0.04, validator=non_negative)
    collective_skew_us: tuple[float, float] = attrs.field(default=(1.0, 6.0), validator=_range)
    batch_slope: tuple[float, float] = attrs.field(default=(0.0, 0.08), validator=_range)
    context_scale: tuple[float, float] = attrs.field(default=(0.75, 1.35), validator=_range)
    pp_loss: tuple[float, float] = attrs.field(default=(0.2, 0.6), validator=_range)
    preempt_ms: tuple[float, float] = attrs.field(default=(0.5, 3.0), validator=_range)
    preempt_gb_s: tuple[float, float] = attrs.field(default=(8.0, 25.0), validator=_range)
    host_cpu: tuple[float, float] = attrs.field(default=(0.75, 1.33), validator=_range)
    sample_ns_per_logit: tuple[float, float] = attrs.field(default=(0.0, 0.08), validator=_range)
    fp8_blockwise_prob: float = attrs.field(default=0.4, validator=_prob)
    fp8_blockwise_cost: tuple[float, float] = attrs.field(default=(1.1, 1.5), validator=_range)
    fp8_kv_read: tuple[float, float] = attrs.field(default=(0.55, 0.8), validator=_range)
    tuning_sigma: float = attrs.field(default=0.12, validator=non_negative)
    vllm_overlap_prob: float = attrs.field(default=0.5, validator=_prob)
    overlap_prob: float = attrs.field(default=0.85, validator=_prob)
    overlap_exposed: tuple[float, float] = attrs.field(default=(0.05, 0.25), validator=_range)
    step_noise_cv: float = attrs.field(default=0.05, validator=non_negative)


@attrs.frozen
class LaunchConfig:
    """Launch delay and partial failures.

    A chain is up ``base_s + weights_gib / load_gib_s + warmup_s`` seconds after the plan is
    applied, times a log-normal jitter of CV ``jitter_cv``.  Each launched replica independently
    never materializes with probability ``fail_prob``, or runs slow (every step time multiplied
    by a factor drawn from ``slow_factor``) with probability ``slow_prob``.
    """

    base_s: float = attrs.field(default=45.0, validator=non_negative)
    load_gib_s: float = attrs.field(default=1.5, validator=positive)
    warmup_s: float = attrs.field(default=30.0, validator=non_negative)
    jitter_cv: float = attrs.field(default=0.2, validator=non_negative)
    fail_prob: float = attrs.field(default=0.03, validator=fraction)
    slow_prob: float = attrs.field(default=0.03, validator=fraction)
    slow_factor: tuple[float, float] = attrs.field(default=(1.5, 3.0), validator=_range)


@attrs.frozen
class SamplingConfig:
    """How much of each window is replayed request by request.

    A job whose window would carry more than ``max_requests_per_window`` requests is replayed on
    a sub-window of ``w = max(min_window_s, max_requests_per_window / rate)`` seconds at the TRUE
    arrival rate, and each replayed request stands for ``window / w`` real ones (see
    docs/evaluation.md, "Sampled windows").  Batch jobs keep ``batch_backlog`` times the number
    of request slots (``replicas × max_batch_size``) queued, so they stay saturated.  True step
    times are cached on a grid of relative spacing ``step_cache_resolution`` over batch shapes
    (see :class:`~koi.surrogate.replay.CachedStepModel`).
    """

    max_requests_per_window: int = attrs.field(default=250, validator=positive_int)
    min_window_s: float = attrs.field(default=10.0, validator=positive)
    batch_backlog: float = attrs.field(default=1.5, validator=positive)
    step_cache_resolution: float = attrs.field(default=0.1, validator=positive)


@attrs.frozen
class SimConfig:
    """Configuration of the simulated fleet (DESIGN §10.1).

    ``preemption_notice_prob`` is the chance that a spot preemption is announced one tick ahead
    (the pool shrinks in the snapshot first, the instance vanishes at the next tick); otherwise
    it vanishes without notice at a random moment of the window.  Preempted spot capacity
    returns to the pool after ``spot_recovery_s``.  A rank reports ``healthy=False`` when a
    replica is missing or (online) its p99 TTFT exceeds ``unhealthy_ttft_factor`` times the
    bound.  Reported SLO margins are clipped below at ``slo_margin_floor``.  Each replica's
    median TPOT is reported (``Observation.replica_tpot_ms``) when it finished at least
    ``min_replica_samples`` multi-token requests in the window, as per-pod engine metrics
    would give it.

    ``drain_backlogs``: the router that splits a job's traffic over its chains counts their
    queues (as a least-outstanding-requests balancer does); off, the split is by capacity
    alone and a chain that fell behind keeps its share of the arrivals.
    """

    truth: TruthConfig = attrs.field(factory=TruthConfig)
    hardware: HardwareConfig = attrs.field(factory=HardwareConfig)
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)
    sampling: SamplingConfig = attrs.field(factory=SamplingConfig)
    preemption_notice_prob: float = attrs.field(default=0.5, validator=fraction)
    spot_recovery_s: float = attrs.field(default=3600.0, validator=non_negative)
    unhealthy_ttft_factor: float = attrs.field(default=2.0, validator=positive)
    slo_margin_floor: float = -10.0
    min_replica_samples: int = attrs.field(default=5, validator=positive_int)
    drain_backlogs: bool = True
