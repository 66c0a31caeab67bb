"""The measured world's truth: steps composed from operator latencies, hidden engine settings.

A replica's true iteration time is built from what its kernels take on its GPU under its
engine (:mod:`koi.sim._kernels`: aiconfigurator-core measurements where they exist, a separate
silicon model elsewhere) and from structural facts drawn per seed and hidden from planners
(:class:`~koi.sim.HardwareConfig`): the engine's real scheduler limits, memory utilisation and
CUDA-graph mode, the usable VRAM and hence the true KV capacity, the interconnect of each
instance type (NVLink, PCIe with or without peer-to-peer), and efficiencies that depend on the
model, the batch, the context and the tensor parallelism.  None of it is a multiplier on the
planner's operator model; docs/evaluation.md says where every number comes from.

Longer than most modules: the per-seed hidden draws (:class:`MeasuredTruth`) and the step model
they parameterise (:class:`MeasuredStepModel` with its operator curves) are one truth, and a
reader checking that a planner cannot see a hidden setting needs both sides in one place.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from statistics import NormalDist

import attrs
import numpy as np

from koi.sim._config import HardwareConfig, TruthConfig
from koi.sim._kernels import KernelSource, UnmeasuredKernels, kernel_source
from koi.sim._truth import ReplicaLimits, SpeedBoard, stable_seed
from koi.surrogate.replay import StepTime
from koi.types import Config, Environment, GpuSpec, LinkKind, ModelSpec, Pool, Quant

__all__ = ["EngineTruth", "LinkTruth", "MeasuredStepModel", "MeasuredTruth"]

_GIB = float(1 << 30)
_HOST_FALLOFF = 1.8
_PLANNED_MEM_UTIL = 0.9  # what HardwareConfig.mem_util is relative to (the engines' default)
_ENGINE_BASE = {"vllm": 1.0, "sglang": 0.8, "trtllm": 0.5}
_EAGER_KERNELS = 14  # kernels per layer launched one by one without CUDA graphs
_PIECEWISE_KERNELS = 4  # attention and collectives left outside piecewise graphs

# The token grid on which per-chain curves are tabulated: every integer up to 64, then 5 %
# steps up to 2^17.  Lookups interpolate linearly between neighbours.
_DIRECT = 64
_STEP = math.log(1.05)
_TOP = 1 << 17


def _token_grid() -> np.ndarray:
    k = math.ceil(math.log(_TOP / _DIRECT) / _STEP)
    tail = _DIRECT * np.exp(_STEP * np.arange(1, k + 1))
    return np.concatenate([np.arange(0, _DIRECT + 1, dtype=float), tail])


_GRID = _token_grid()
_GRID_1 = np.maximum(_GRID, 1.0)
_GRID_2 = 2.0 * _GRID_1  # prompts twice as long: the marginal cost of prefill attention
_GRID_LIST = _GRID.tolist()
_LAST = len(_GRID_LIST) - 2


def _at(curve: list[float], x: float) -> float:
    """Linear interpolation of a curve tabulated on :data:`_GRID` at ``x >= 0``."""
    if x <= _DIRECT:
        i = int(x)
        if i == x:
            return curve[i]
    else:
        i = min(_DIRECT + int(math.log(x / _DIRECT) / _STEP), _LAST)
        while i > _DIRECT and _GRID_LIST[i] > x:
            i -= 1
    i = min(i, _LAST)
    x0, x1 = _GRID_LIST[i], _GRID_LIST[i + 1]
    f = (x - x0) / (x1 - x0)
    return float(curve[i] + (curve[i + 1] - curve[i]) * f)


@attrs.frozen
class EngineTruth:
    """What one deployment (engine × model) really runs with in one seeded world (hidden).

    The engine's software costs (``base_ms`` … ``preempt_gb_s``, ``kv_read``) are drawn per
    engine; the flags a deployment is started with (memory, scheduler, graphs, mixed chunks,
    sampling) per engine and model, since the team serving a model sets them.
    """

    mem_offset: float
    graph_pool_gib: float
    seqs_scale: float
    tokens_scale: float
    mixed_prefill: bool
    capture_max: int
    base_ms: float
    per_seq_us: float
    launch_us: float
    preempt_ms: float
    preempt_gb_s: float
    sample_ns: float
    kv_read: float
    overlap: bool
    exposed: float


@attrs.frozen
class LinkTruth:
    """How one chain's GPUs really talk: ``kind`` is nvlink, fabric, p2p, host or internode."""

    kind: str
    host_gb_s: float = 0.0
    hop_us: float = 0.0


_NORMAL = NormalDist()


def _probit(u: float) -> float:
    """The standard normal quantile of ``u`` (clipped away from 0 and 1)."""
    return _NORMAL.inv_cdf(min(max(u, 1e-9), 1.0 - 1e-9))


def _capture_pad(n: int, cap: int) -> int:
    """The CUDA-graph batch size a decode batch of ``n`` runs at (``n`` above ``cap``)."""
    if n > cap:
        return n
    if n <= 2:
        return n
    if n <= 4:
        return 4
    return -(-n // 8) * 8


@attrs.frozen
class _Shape:
    """Per-GPU GEMM and attention shapes of one (model, config)."""

    hidden: int
    q_heads: int
    kv_heads: float
    head_dim: int
    qkv_n: int
    o_k: int
    mlp_up_n: int
    mlp_down_k: int
    vocab_n: int
    moe: tuple[int, int, int, int] | None
    layers: int  # per pipeline stage


def _shape(model: ModelSpec, config: Config) -> _Shape:
    tp, pp = config.tp, config.pp
    q = max(model.heads // tp, 1)
    kv = max(model.kv_heads / tp, 1.0)
    hd = model.head_dim
    moe = None
    if model.is_moe:
        moe = (model.hidden, model.expert_intermediate, model.experts_per_token, model.experts)
    return _Shape(
        hidden=model.hidden,
        q_heads=q,
        kv_heads=kv,
        head_dim=hd,
        qkv_n=int((q + 2 * kv) * hd),
        o_k=q * hd,
        mlp_up_n=max(2 * model.intermediate // tp, 1),
        mlp_down_k=max(model.intermediate // tp, 1),
        vocab_n=max(model.vocab // tp, 1),
        moe=moe,
        layers=math.ceil(model.layers / pp),
    )


def _dtype(quant: Quant) -> str:
    return {Quant.BF16: "bf16", Quant.FP8: "fp8", Quant.INT4: "int4"}[quant]


class _Curves:
    """Per-layer operator times (ms) of one chain, tabulated over the token grid."""

    __slots__ = (
        "ar_eager",
        "ar_graph",
        "dec_a",
        "dec_s",
        "head",
        "lin",
        "lin_c",
        "pre_a",
        "pre_s",
        "send",
    )

    def __init__(
        self,
        src: KernelSource,
        gpu: GpuSpec,
        model: ModelSpec,
        config: Config,
        link: LinkTruth,
        context_scale: float,
        fp8_cost: float = 1.0,
        kv_read: float = 1.0,
        tuning: float = 1.0,
    ) -> None:
        s = _shape(model, config)
        g = _GRID_1
        dt = _dtype(config.quant)
        lin = src.gemm(g, s.qkv_n, s.hidden, dt) + src.gemm(g, s.hidden, s.o_k, dt)
        if s.moe is not None:
            lin = lin + src.moe(g, s.moe, config.tp, dt)
        else:
            lin = lin + src.gemm(g, s.mlp_up_n, s.hidden, dt)
            lin = lin + src.gemm(g, s.hidden, s.mlp_down_k, dt)
        # Share of GEMM time that is compute-bound: tokens past the GPU's ridge point.
        peak = (gpu.fp8_tflops if dt == "fp8" and gpu.fp8_tflops else gpu.bf16_tflops) or 1.0
        ridge = peak / max(gpu.hbm_tb_s, 1e-3)
        lin_c = lin * g / (g + ridge)
        lin = lin * tuning
        if dt == "fp8" and fp8_cost != 1.0:
            # Block-wise scales: the scaling work lands on the compute-bound share.
            lin = lin + (fp8_cost - 1.0) * lin_c
            lin_c = lin_c * fp8_cost
        head = src.gemm(g, s.vocab_n, s.hidden, "bf16")
        # Prefill attention of t query tokens, affine in causal query-key pairs p:
        # a(t) + p * alpha(t), alpha the measured marginal cost per pair between one prompt of
        # t and one of 2t tokens, a so that one prompt of t tokens costs what was measured.
        l1 = src.prefill_attention(g, s.q_heads, s.head_dim)
        l2 = src.prefill_attention(_GRID_2, s.q_heads, s.head_dim)
        alpha = np.maximum((l2 - l1) / (1.5 * g * g), 1e-12) * context_scale
        pre_a = np.maximum(l1 - alpha * g * g / 2.0, 0.25 * l1)
        # Decode attention of n sequences, affine in their summed context c: the secant of the
        # measured latency between 256 and 8192 tokens of context per sequence.
        lo = src.decode_attention(g, 256.0, s.kv_heads, s.head_dim)
        hi = src.decode_attention(g, 8192.0, s.kv_heads, s.head_dim)
        dec_s = np.maximum((hi - lo) / (g * (8192.0 - 256.0)), 1e-12) * context_scale * kv_read
        dec_a = np.maximum(lo - dec_s * g * 256.0, 0.25 * lo)
        msg = g * s.hidden * 2.0
        self.ar_graph = self.ar_eager = np.zeros_like(g)
        if config.tp > 1:
            self.ar_graph = _allreduce(src, gpu, msg, config.tp, "graph", link)
            self.ar_eager = _allreduce(src, gpu, msg, config.tp, "eager", link)
        self.send = np.zeros_like(g)
        if config.pp > 1:
            bw = (gpu.internode_gb_s if link.kind == "internode" else gpu.link_gb_s) * 1e9
            if link.kind == "host":
                bw = link.host_gb_s * 1e9
            self.send = (msg / (0.7 * bw) + 20e-6) * 1e3
        zero = (0.0,)
        self.lin = list(zero) + lin.tolist()[1:]
        self.lin_c = list(zero) + lin_c.tolist()[1:]
        self.head = list(zero) + head.tolist()[1:]
        self.pre_a = pre_a.tolist()
        self.pre_s = alpha.tolist()
        self.dec_a = dec_a.tolist()
        self.dec_s = dec_s.tolist()
        self.ar_graph = np.asarray(self.ar_graph).tolist()
        self.ar_eager = np.asarray(self.ar_eager).tolist()
        self.send = np.asarray(self.send).tolist()


class _MemoSource:
    """A :class:`KernelSource` whose curves over the token grid (and, for prefill attention,
    twice the grid) are computed once per argument tuple (chains of one GPU and engine share
    most of their operators)."""

    def __init__(self, src: KernelSource) -> None:
        self.src = src
        self.name = src.name
        self._memo: dict[tuple[object, ...], np.ndarray] = {}

    def _get(
        self, key: tuple[object, ...], x: np.ndarray, fn: Callable[[], np.ndarray]
    ) -> np.ndarray:
        if x is _GRID_2:
            key = (*key, 2)
        elif x is not _GRID_1 and not (x.shape == _GRID_1.shape and (x == _GRID_1).all()):
            return fn()
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = fn()
        return hit

    def gemm(self, m: np.ndarray, n: int, k: int, dtype: str) -> np.ndarray:
        return self._get(("g", n, k, dtype), m, lambda: self.src.gemm(m, n, k, dtype))

    def prefill_attention(self, s: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
        return self._get(
            ("p", heads, head_dim), s, lambda: self.src.prefill_attention(s, heads, head_dim)
        )

    def decode_attention(
        self, batch: np.ndarray, context: float, kv_heads: float, head_dim: int
    ) -> np.ndarray:
        return self._get(
            ("d", context, kv_heads, head_dim),
            batch,
            lambda: self.src.decode_attention(batch, context, kv_heads, head_dim),
        )

    def moe(
        self, tokens: np.ndarray, shape: tuple[int, int, int, int], tp: int, dtype: str
    ) -> np.ndarray:
        return self._get(
            ("m", shape, tp, dtype), tokens, lambda: self.src.moe(tokens, shape, tp, dtype)
        )

    def allreduce(self, nbytes: np.ndarray, gpus: int, mode: str) -> np.ndarray:
        return self.src.allreduce(nbytes, gpus, mode)


def _allreduce(
    src: KernelSource, gpu: GpuSpec, nbytes: np.ndarray, g: int, mode: str, link: LinkTruth
) -> np.ndarray:
    """One all-reduce over the chain's ``g`` GPUs, by the instance's real interconnect."""
    if link.kind == "host":
        # No peer-to-peer: NCCL stages every ring step through pinned host memory.
        # Every GPU stages through the same host memory at once: the bus bandwidth per GPU
        # falls roughly as g^-1.8 (the measured L40S box: 20, 5.1, 1.5 GB/s at 2, 4, 8 GPUs).
        bw = link.host_gb_s * 1e9 * (2.0 / g) ** _HOST_FALLOFF
        ring = 2.0 * (g - 1) / g * nbytes / bw
        staged = (ring + 2 * (g - 1) * link.hop_us * 1e-6) * 1e3
        if _unmeasured(src):
            return np.asarray(staged)
        return np.asarray(np.maximum(staged, src.allreduce(nbytes, g, "nccl")))
    if link.kind == "internode":
        ring = 2.0 * (g - 1) / g * nbytes / (gpu.internode_gb_s * 1e9 * 0.8)
        return np.asarray((ring + (g - 1) * 12e-6) * 1e3)
    if link.kind == "p2p":
        # PCIe peer-to-peer through the host bridge: a shared switch, small per-hop latency.
        # The measured PCIe boxes' NCCL runs at host-staging speed (their topology is not
        # recorded), so a P2P instance is bounded by this ring.
        ring = 2.0 * (g - 1) / g * nbytes / (gpu.link_gb_s * 1e9 * 0.55)
        p2p = (ring + (g - 1) * 8e-6) * 1e3
        if _unmeasured(src):
            return np.asarray(p2p)
        return np.asarray(np.minimum(p2p, src.allreduce(nbytes, g, mode)))
    custom = src.allreduce(nbytes, g, mode)
    if _unmeasured(src):
        return custom
    # Engines use their custom all-reduce below 8 MiB and NCCL above.
    nccl = src.allreduce(nbytes, g, "nccl")
    return np.where(nbytes <= 8 * (1 << 20), np.minimum(custom, nccl * 1.5), nccl)


def _unmeasured(src: KernelSource) -> bool:
    inner = src.src if isinstance(src, _MemoSource) else src
    return isinstance(inner, UnmeasuredKernels)


class MeasuredStepModel:
    """A :class:`~koi.surrogate.replay.StepTimeModel` of one replica in the measured world.

    Affine in prefill pairs and decode context for a fixed batch shape (the engine's step
    cache relies on it): every context-dependent term is an intercept plus a slope.
    """

    __slots__ = (
        "_board",
        "_c",
        "_cap",
        "_eager",
        "_engine",
        "_et",
        "_f",
        "_gpu",
        "_host",
        "_layers",
        "_noise",
        "_pp",
        "_pp_loss",
        "_sample_ms",
        "_skew_ms",
        "_slope",
        "_terms",
        "_tp",
        "slow",
    )

    def __init__(
        self,
        curves: _Curves,
        *,
        engine: EngineTruth,
        eager: bool,
        layers: int,
        tp: int,
        pp: int,
        pp_loss: float,
        factor: float,
        batch_slope: float,
        board: SpeedBoard,
        gpu: str,
        engine_name: str,
        slow: float,
        noise: tuple[int, float],
        host: float = 1.0,
        sample_ms: float = 0.0,
        skew_ms: float = 0.0,
    ) -> None:
        self._c = curves
        self._et = engine
        self._eager = eager
        self._cap = engine.capture_max
        self._layers = layers
        self._tp, self._pp, self._pp_loss = tp, pp, pp_loss
        self._f = factor
        self._slope = batch_slope
        self._board = board
        self._gpu = gpu
        self._engine = engine_name
        self.slow = slow
        self._noise = noise
        self._host = host
        self._sample_ms = sample_ms
        self._skew_ms = skew_ms
        self._terms: dict[tuple[int, int], tuple[float, ...]] = {}

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        c, m, k, b, o = self.step_parts(
            prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens
        )
        return StepTime(compute_s=c, memory_s=m, comm_s=k, bubble_s=b, overhead_s=o)

    def step_parts(
        self, prefill_tokens: int, prefill_pairs: float, decode_seqs: int, context_tokens: int
    ) -> tuple[float, float, float, float, float]:
        """The fields of :meth:`step` (compute, memory, comm, bubble, overhead) as a tuple:
        what the engine's step cache reads when it builds a node."""
        key = (prefill_tokens, decode_seqs)
        terms = self._terms.get(key)
        if terms is None:
            terms = self._terms[key] = self._shape_terms(prefill_tokens, decode_seqs)
        base, base_c, per_pair, per_ctx, comm, send, over, noise = terms
        kern = base + per_pair * prefill_pairs + per_ctx * context_tokens
        kern_c = base_c + per_pair * prefill_pairs
        bubble = 0.0
        if self._pp > 1:
            bubble = (self._pp - 1) * (self._pp_loss * (kern + comm) + send)
        s = noise * self.slow / self._board.speed(self._gpu, self._engine) * 1e-3
        return (kern_c * s, kern * s, comm * s, bubble * s, over * s)

    def _shape_terms(self, t: int, n: int) -> tuple[float, ...]:
        """Everything of a step that depends on its batch shape only (ms): kernel time at
        zero pairs and context (memory- and compute-bound), its slopes per prefill pair and
        per context token, collectives, the pipeline send, CPU overhead and the noise.
        Memoised per shape: the engine's step cache asks three times per shape."""
        c = self._c
        graphed = not self._eager and t == 0 and 0 < n <= self._cap
        nb = _capture_pad(n, self._cap) if graphed else n
        tokens = t + nb
        layers = self._layers
        lin = _at(c.lin, tokens)
        layer = lin
        layer_c = _at(c.lin_c, tokens)
        per_pair = per_ctx = 0.0
        if t:
            pre = _at(c.pre_a, t)
            layer += pre
            layer_c += pre
            per_pair = _at(c.pre_s, t)
        if n:
            layer += _at(c.dec_a, nb)
            per_ctx = _at(c.dec_s, nb)
        logits = nb + (1 if t else 0)
        head = _at(c.head, logits)
        batch = math.exp(self._slope * (math.log2(max(n, 1)) - 4.0)) if n else 1.0
        k = self._f * batch
        # Sampling over the vocabulary (top-p sorts, penalties) per sequence that samples.
        base = (layers * layer + head) * k + self._sample_ms * logits
        base_c = (layers * layer_c + head * logits / (logits + 300.0)) * k
        comm = 0.0
        if self._tp > 1:
            ar = _at(c.ar_graph if graphed else c.ar_eager, tokens)
            comm = 2.0 * layers * (ar + self._skew_ms)
        send = _at(c.send, tokens) if self._pp > 1 else 0.0
        et = self._et
        over = (et.base_ms + et.per_seq_us * 1e-3 * (n + (1 if t else 0))) * self._host
        if et.overlap:
            # The scheduler prepares the next iteration while this one's kernels run: only
            # what outlasts the context-free GPU work (and the sync points) shows.
            floor = (layers * lin + head) * k
            over = max(over - floor, et.exposed * over)
        if not graphed:
            kernels = _EAGER_KERNELS if (self._eager or t == 0) else _PIECEWISE_KERNELS
            over += layers * kernels * et.launch_us * 1e-3 * self._host
        label, sigma = self._noise
        noise = 1.0
        if sigma > 0.0:
            # Log-normal noise of mean 1 keyed by the batch shape only (affine in pairs and
            # context, so the engine's step cache stays exact).
            u = (zlib.crc32(f"{label}:{t}:{n}".encode()) + 0.5) / 4294967296.0
            noise = math.exp(sigma * _NORMAL.inv_cdf(u) - 0.5 * sigma * sigma)
        return (
            base,
            base_c,
            layers * per_pair * k,
            layers * per_ctx * k,
            comm,
            send,
            over,
            noise,
        )


class MeasuredTruth:
    """The hidden hardware of one seeded measured world (see the module docstring).

    Every hidden quantity is a pure function of the seed and its key, so two runs with the
    same seed see the same hardware whatever the policies do, and a reference planner holding
    a :class:`MeasuredTruth` of the same seed (and pools) sees the same steps.
    """

    kind = "measured"

    def __init__(
        self,
        seed: int,
        hw: HardwareConfig | None = None,
        truth: TruthConfig | None = None,
        *,
        pools: Sequence[Pool] = (),
    ) -> None:
        self._seed = seed
        self._hw = hw or HardwareConfig()
        self._cfg = truth or TruthConfig()
        self.board = SpeedBoard()
        self._curves: dict[tuple[object, ...], _Curves] = {}
        self._steps: dict[tuple[object, ...], MeasuredStepModel] = {}
        self._memo: dict[tuple[object, ...], object] = {}
        self._sources: dict[tuple[str, str], _MemoSource] = {}
        # A chain without an environment (reference planners) runs on the fleet's multi-GPU
        # instance type of its GPU with the worst interconnect.
        self._instances: dict[str, list[Environment]] = {}
        for p in pools:
            self._instances.setdefault(p.environment.gpu, []).append(p.environment)

    # -- draws --------------------------------------------------------------------------------

    def _rng(self, *labels: object) -> np.random.Generator:
        return np.random.default_rng([self._seed, stable_seed("measured", *labels)])

    def _u(self, span: tuple[float, float], *labels: object) -> float:
        key = ("u", span, *labels)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = float(self._rng(*labels).uniform(*span))
        return hit  # type: ignore[return-value]

    def engine(self, engine: str, model: ModelSpec) -> EngineTruth:
        """What ``engine`` really runs ``model`` with (per seed, engine and model)."""
        key = ("engine", engine, model.name)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._draw_engine(engine, model.name)
        return hit  # type: ignore[return-value]

    def _draw_engine(self, engine: str, model: str) -> EngineTruth:
        hw = self._hw
        soft = self._rng("engine", engine)
        flags = self._rng("deployment", engine, model)
        seqs = float(flags.choice(hw.seqs_scale, p=hw.seqs_scale_p))
        toks = float(flags.choice(hw.tokens_scale, p=hw.tokens_scale_p))
        mixed = engine != "sglang" or bool(flags.uniform() < hw.sglang_mixed_prob)
        overlap_p = hw.vllm_overlap_prob if engine == "vllm" else hw.overlap_prob
        return EngineTruth(
            mem_offset=float(flags.uniform(*hw.mem_util)) - _PLANNED_MEM_UTIL,
            graph_pool_gib=float(flags.uniform(*hw.graph_pool_gib)),
            seqs_scale=seqs,
            tokens_scale=toks,
            mixed_prefill=mixed,
            capture_max=int(flags.choice(hw.capture_max)),
            base_ms=float(soft.uniform(*hw.base_ms)) * _ENGINE_BASE.get(engine, 1.0),
            per_seq_us=float(soft.uniform(*hw.per_seq_us)),
            launch_us=float(soft.uniform(*hw.launch_us)),
            preempt_ms=float(soft.uniform(*hw.preempt_ms)),
            preempt_gb_s=float(soft.uniform(*hw.preempt_gb_s)),
            sample_ns=float(flags.uniform(*hw.sample_ns_per_logit)),
            kv_read=float(soft.uniform(*hw.fp8_kv_read)),
            overlap=bool(flags.uniform() < overlap_p),
            exposed=float(soft.uniform(*hw.overlap_exposed)),
        )

    def eager(self, config: Config, model: ModelSpec) -> bool:
        """Whether the deployment runs without CUDA graphs: asked for (``cuda_graphs`` False),
        or graphs failed to capture for ``model`` on the engine (per seed, engine, model)."""
        if not config.cuda_graphs:
            return True
        return self._u((0.0, 1.0), "eager", config.engine, model.name) < self._hw.eager_prob

    def host_cpu(self, environment: Environment | None) -> float:
        """How much slower than the reference host the instance's CPU runs the engine's
        scheduler (per cloud and instance type; 1 without an instance)."""
        if environment is None:
            return 1.0
        where = (environment.cloud, environment.instance_type)
        return self._u(self._hw.host_cpu, "host-cpu", *where)

    def fp8_blockwise(self, model: ModelSpec) -> float:
        """The factor on compute-bound FP8 GEMM time of ``model``'s FP8 checkpoint: 1 for
        per-tensor scales, drawn for block-wise scales (per seed and model)."""
        if self._u((0.0, 1.0), "fp8-block", model.name) >= self._hw.fp8_blockwise_prob:
            return 1.0
        return self._u(self._hw.fp8_blockwise_cost, "fp8-block-cost", model.name)

    def tuning(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> float:
        """How much faster or slower than the measured shapes ``model``'s GEMMs run in
        ``config``'s dtype on ``gpu`` under its engine: tuned kernel configurations cover some
        shapes and not others (per seed, GPU, engine, model and dtype; log-normal)."""
        key = (gpu.name, config.engine, model.name, config.quant)
        z = _probit(self._u((0.0, 1.0), "tuning", *key))
        return math.exp(self._hw.tuning_sigma * z)

    def kv_fp8(self, config: Config) -> bool:
        """Whether the KV cache is FP8: asked for, or TensorRT-LLM serving an FP8 checkpoint
        (it takes the checkpoint's KV dtype; vLLM and SGLang keep BF16 under ``auto``)."""
        if config.kv_cache_dtype == "fp8":
            return True
        return config.engine == "trtllm" and config.quant is Quant.FP8

    def link(self, gpu: GpuSpec, config: Config, environment: Environment | None) -> LinkTruth:
        """The real interconnect of a chain's GPUs."""
        if config.gpus <= 1:
            return LinkTruth("none")
        env = environment
        if env is None:
            envs = [e for e in self._instances.get(gpu.name, []) if e.gpus_per_instance > 1]
            links = [self.link(gpu, config, e) for e in envs]
            order = {"host": 0, "internode": 1, "p2p": 2, "fabric": 3, "nvlink": 4}
            if not links:
                return self._kind(LinkKind(gpu.link))
            return min(links, key=lambda lk: order.get(lk.kind, 5))
        if config.gpus > env.gpus_per_instance:
            return LinkTruth("internode")
        declared = env.link or LinkKind(gpu.link)
        kind = self._kind(declared)
        if kind.kind != "p2p":
            return kind
        # A node the catalog says lacks peer-to-peer always stages through host memory; one it
        # says has it may still not (virtualised or ACS-enabled hosts), hidden, per instance type.
        where = (env.cloud, env.instance_type)
        staged = declared is LinkKind.PCIE_NO_P2P
        if staged or self._u((0.0, 1.0), "p2p", *where) < self._hw.no_p2p_prob:
            return LinkTruth(
                "host",
                host_gb_s=self._u(self._hw.host_gb_s, "host-bw", *where),
                hop_us=self._u(self._hw.host_hop_us, "host-hop", *where),
            )
        return kind

    @staticmethod
    def _kind(link: LinkKind) -> LinkTruth:
        if link is LinkKind.NVLINK:
            return LinkTruth("nvlink")
        if link in (LinkKind.PCIE, LinkKind.PCIE_NO_P2P):
            return LinkTruth("p2p")
        return LinkTruth("fabric")

    def _factor(
        self, gpu: GpuSpec, model: ModelSpec, config: Config, environment: Environment | None
    ) -> float:
        hw = self._hw
        # Normal draws through the memoised uniforms (inverse CDF).  Sustained clocks follow
        # the chassis (power cap, cooling) of each instance type.
        where = (environment.cloud, environment.instance_type) if environment else ()
        z_model = _probit(self._u((0.0, 1.0), "model", model.name))
        z_clock = _probit(self._u((0.0, 1.0), "clock", gpu.name, *where))
        return math.exp(hw.model_sigma * z_model + hw.clock_sigma * z_clock)

    # -- memory -------------------------------------------------------------------------------

    def limits(
        self, gpu: GpuSpec, model: ModelSpec, config: Config, environment: Environment | None
    ) -> ReplicaLimits | None:
        """True KV capacity and scheduler limits of one replica; ``None`` if it cannot start.

        Honours the config's engine knobs (memory utilisation, CUDA graphs, chunked prefill,
        ``max_model_len``, KV dtype) the way the engines do, on the hidden usable VRAM.
        """
        et = self.engine(config.engine, model)
        s = _shape(model, config)
        tp, pp = config.tp, config.pp
        wbytes = {Quant.BF16: 2.0, Quant.FP8: 1.0, Quant.INT4: 0.5}[config.quant]
        attn = model.hidden * (model.heads + 2 * model.kv_heads) * model.head_dim
        attn += model.heads * model.head_dim * model.hidden
        if model.is_moe:
            mlp = model.experts * 3 * model.hidden * model.expert_intermediate
            mlp += model.hidden * model.experts
        else:
            mlp = 3 * model.hidden * model.intermediate
        body = model.layers * (attn + mlp) * wbytes / (tp * pp)
        embed = 2.0 * model.vocab * model.hidden * 2.0 / tp
        weights = (body + embed) / _GIB
        tokens = max(512, round(config.max_batched_tokens * et.tokens_scale))
        if not config.chunked_prefill:
            # Whole prompts per iteration: the engine sizes its step for the longest one.
            tokens = max(tokens, config.max_model_len or 0)
        i_tp = (
            model.experts_per_token * model.expert_intermediate if model.is_moe
            else model.intermediate
        ) / tp  # fmt: skip
        act = (tokens * (4 * model.hidden + 2 * i_tp) * 2.0 * 1.5) / _GIB + 0.4
        graphs = 0.0 if self.eager(config, model) else et.graph_pool_gib
        nccl = 0.25 if tp * pp > 1 else 0.0
        where = (environment.cloud, environment.instance_type) if environment else ()
        reserve = self._u(self._hw.vram_reserve, "vram", gpu.name, *where)
        device = gpu.memory_gib * (1.0 - reserve)
        u = min(max(config.gpu_memory_utilization + et.mem_offset, 0.05), 0.99)
        other = act + graphs + nccl
        if config.engine == "sglang":  # mem_fraction_static: weights and KV only
            kv_gib = u * device - weights
        elif config.engine == "trtllm":  # free_gpu_memory_fraction of what is left
            kv_gib = u * (device - weights - other)
        else:  # vLLM: the utilisation covers everything the engine allocates
            kv_gib = u * device - weights - other
        kv_bytes = 1.0 if self.kv_fp8(config) else 2.0
        per_token = 2.0 * s.layers * s.kv_heads * s.head_dim * kv_bytes
        kv_tokens = int(max(kv_gib, 0.0) * _GIB / per_token)
        if kv_tokens < max(self._hw.min_kv_tokens, config.max_model_len or 0):
            return None
        seqs = max(1, round(config.max_batch_size * et.seqs_scale))
        return ReplicaLimits(
            kv_capacity_tokens=kv_tokens,
            max_batch_size=seqs,
            max_batched_tokens=tokens,
            mixed_prefill=et.mixed_prefill and config.chunked_prefill,
            chunk_admission=config.engine == "vllm" and config.chunked_prefill,
            preempt_stall_s=et.preempt_ms * 1e-3,
            preempt_stall_s_per_token=per_token / (et.preempt_gb_s * 1e9),
        )

    # -- steps --------------------------------------------------------------------------------

    def _source(self, gpu: GpuSpec, engine: str) -> _MemoSource:
        key = (gpu.name, engine)
        src = self._sources.get(key)
        if src is None:
            src = self._sources[key] = _MemoSource(kernel_source(gpu, engine))
        return src

    def step_model(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        config: Config,
        *,
        slow: float = 1.0,
        environment: Environment | None = None,
    ) -> MeasuredStepModel:
        """The true step-time model of one replica (``slow`` > 1 for a degraded replica).

        Memoised: the model is a pure function of its arguments and the seed (the GPU's
        current speed is read at every step), so the world's reference capacities, its
        replicas and its replicas after a driver update share one model and its per-shape
        terms."""
        key = (gpu, model, config, slow, environment)
        hit = self._steps.get(key)
        if hit is None:
            hit = self._steps[key] = self._step_model(gpu, model, config, slow, environment)
        return hit

    def _step_model(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        config: Config,
        slow: float,
        environment: Environment | None,
    ) -> MeasuredStepModel:
        hw = self._hw
        link = self.link(gpu, config, environment)
        et = self.engine(config.engine, model)
        cscale = self._u(hw.context_scale, "context", gpu.name, config.engine, model.name)
        fp8_cost = self.fp8_blockwise(model)
        kv_read = et.kv_read if self.kv_fp8(config) else 1.0
        key: tuple[object, ...] = (gpu.name, model.name, config.engine, config.tp, config.pp)
        tuning = self.tuning(gpu, model, config)
        key += (config.quant, link, cscale, fp8_cost, kv_read, tuning)
        curves = self._curves.get(key)
        if curves is None:
            src = self._source(gpu, config.engine)
            curves = self._curves[key] = _Curves(
                src, gpu, model, config, link, cscale, fp8_cost, kv_read, tuning
            )
        cv = hw.step_noise_cv
        sigma = math.sqrt(math.log1p(cv * cv))
        label = stable_seed("noise", self._seed, gpu.name, model.name, config, slow)
        return MeasuredStepModel(
            curves,
            engine=et,
            eager=self.eager(config, model),
            layers=_shape(model, config).layers,
            tp=config.tp,
            pp=config.pp,
            pp_loss=self._u(hw.pp_loss, "pp"),
            factor=self._factor(gpu, model, config, environment),
            batch_slope=self._u(hw.batch_slope, "batch", gpu.name, config.engine, model.name),
            board=self.board,
            gpu=gpu.name,
            engine_name=config.engine,
            slow=slow,
            noise=(label, sigma),
            host=self.host_cpu(environment),
            # Sorting is memory-bound: the draw is at H100 bandwidth (3.35 TB/s).
            sample_ms=model.vocab * et.sample_ns * 1e-6 * 3.35 / max(gpu.hbm_tb_s, 0.1),
            # Every collective waits for its slowest rank: more ranks, more skew.
            skew_ms=self._u(hw.collective_skew_us, "skew", gpu.name, config.engine)
            * 1e-3
            * math.log2(config.tp),
        )

    def driver_update(
        self,
        gpu: str,
        rng: np.random.Generator,
        *,
        engine: str | None = None,
        speed: float | None = None,
    ) -> float:
        """Move ``gpu``'s speed by ``speed`` (or a drawn 10–30 % either way); return the factor."""
        error = self._cfg.driver_update_error
        return self.board.drift(gpu, rng, error, engine=engine, speed=speed)
