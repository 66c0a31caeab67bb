"""Operator-level step-time model of one replica (DESIGN §9.1).

One continuous-batching iteration is the sum of its operators, each bounded by compute or by
memory with per-vendor efficiencies: dense GEMMs, MoE expert GEMMs, attention, the LM head,
tensor-parallel all-reduces on the GPU's link, pipeline send/recv and bubbles, and a fixed
per-step engine overhead.  Everything is a deterministic function of (gpu, model, config, cfg).
"""

from __future__ import annotations

import math
from functools import cached_property

import attrs

from koi.surrogate._config import Efficiency, SurrogateConfig, kv_bytes_per_value
from koi.surrogate.replay._step import StepFromParts, StepParts, StepTime
from koi.types import Config, GpuSpec, LinkKind, ModelSpec, Quant

__all__ = ["OperatorModel", "model_parameters"]

_TERA = 1e12
_GIGA = 1e9
#: Batch shapes whose shape-only terms one model keeps (see ``OperatorModel._shape_terms``):
#: a few suffice, since the step cache asks for each shape three times in a row, and every
#: model the surrogate keeps holds its own.
_SHAPE_MEMO = 16
#: (micro-batches, compute, memory, core, KV fill factor, LM-head compute, LM-head and sampling
#: memory, comm, overhead, any tokens) of one batch shape.
_Shape = tuple[float, float, float, float, float, float | None, float, float, float, bool]


@attrs.frozen
class ParameterSplit:
    """Parameter counts (not billions) of one model, split by how a token touches them."""

    shared_linear: float  # GEMM weights every token multiplies (attention, dense/shared FFN)
    expert_each: float  # one routed expert's weights over all layers (0 for dense models)
    experts: int
    lm_head: float
    embedding: float

    @property
    def expert_total(self) -> float:
        return self.experts * self.expert_each

    @property
    def stored(self) -> float:
        """Weights resident on the GPUs."""
        return self.shared_linear + self.expert_total + self.lm_head + self.embedding


def model_parameters(model: ModelSpec) -> ParameterSplit:
    """Split a model's parameters into shared GEMM weights, experts, LM head and embedding.

    The totals honour the spec's ``params_b`` / ``active_params_b``; the architecture fields
    only decide the split (a routed expert has ``3 * hidden * expert_intermediate`` weights per
    layer).  The LM head is counted as untied.
    """
    emb = float(model.vocab * model.hidden)
    total = model.params_b * _GIGA
    active = model.active_params_b * _GIGA
    if not model.is_moe:
        shared = max(total - 2 * emb, 0.5 * total)
        return ParameterSplit(shared, 0.0, 0, emb, emb)
    each = 3.0 * model.hidden * model.expert_intermediate * model.layers
    expert_total = min(model.experts * each, 0.95 * (total - 2 * emb))
    each = expert_total / model.experts
    shared = max(active - 2 * emb - model.experts_per_token * each, 0.01 * total)
    return ParameterSplit(shared, each, model.experts, emb, emb)


def _distinct_experts(tokens: float, experts: int, per_token: int) -> float:
    """Expected number of distinct experts hit by ``tokens`` tokens under uniform routing."""
    if tokens <= 0:
        return 0.0
    miss: float = (1.0 - per_token / experts) ** tokens
    return experts * (1.0 - miss)


@attrs.frozen
class OperatorModel(StepFromParts):
    """Step times of one replica of ``model`` on ``config.tp * config.pp`` GPUs of type ``gpu``.

    Implements :class:`koi.surrogate.replay.StepTimeModel`.  With ``pp`` stages the engine keeps
    ``pp`` micro-batches in flight, so one iteration (every running sequence advances one token)
    lasts ``pp`` stage slots:

    .. math::

        t_{compute} = \\frac{F(T)}{pp\\,tp\\,\\Pi\\,\\eta_g(T/pp)},\\qquad
        t_{memory} = \\frac{W}{tp\\,B_{hbm}\\eta_m}
                   + \\frac{K(C)}{pp\\,\\min(tp,h_{kv})\\,B_{hbm}\\eta_m}

    with ``F`` the GEMM+attention FLOPs of the ``T`` tokens, ``W`` the weight bytes read (for
    MoE only the experts the batch routes to), ``K(C)`` the KV bytes of ``C`` context tokens,
    ``Π`` the peak of the math format and ``η_g(x) = η·x/(x + x½)`` the small-GEMM ramp.
    All-reduces follow a ring: ``2 L (λ + 2(tp-1)/tp · T h b / (B_link η_link))``.
    """

    gpu: GpuSpec
    model: ModelSpec
    config: Config
    cfg: SurrogateConfig = attrs.field(factory=SurrogateConfig, kw_only=True)

    @cached_property
    def _eff(self) -> Efficiency:
        return self.cfg.efficiency_for(self.gpu.name, self.gpu.vendor)

    @cached_property
    def _params(self) -> ParameterSplit:
        return model_parameters(self.model)

    @cached_property
    def _gemm_format(self) -> str:
        """The tensor-core format the GEMMs run in: ``int4``, ``fp8`` or ``bf16``."""
        q, g = self.config.quant, self.gpu
        if q is Quant.INT4 and self.cfg.int4_activations and g.int4_tflops:
            return "int4"
        if q in (Quant.FP8, Quant.INT4) and g.fp8_tflops:
            return "fp8"
        return "bf16"

    @cached_property
    def gemm_peak_flops(self) -> float:
        """Peak FLOP/s of the GEMM math format the quantization allows on this GPU."""
        g, fmt = self.gpu, self._gemm_format
        if fmt == "int4" and g.int4_tflops:
            return g.int4_tflops * _TERA
        if fmt == "fp8" and g.fp8_tflops:
            return g.fp8_tflops * _TERA
        return g.bf16_tflops * _TERA

    @cached_property
    def _kv_bytes_per_token(self) -> float:
        """KV bytes of one context token over all layers, one copy."""
        m = self.model
        return 2.0 * m.layers * m.kv_heads * m.head_dim * kv_bytes_per_value(self.config, self.cfg)

    @cached_property
    def _kv_shards(self) -> int:
        # KV heads shard over tp; beyond kv_heads they are replicated, not split further.
        return min(self.config.tp, self.model.kv_heads)

    @cached_property
    def _kv_heads_per_gpu(self) -> float:
        return max(self.model.kv_heads / self.config.tp, 1.0)

    @cached_property
    def _collectives(self) -> tuple[float, float, float, float]:
        """(fixed s, s per byte) of one tensor-parallel all-reduce, then of one stage send/recv.

        The tensor-parallel group uses the GPU's intra-node link (``gpu.link``: NVLink, PCIe with
        or without peer-to-peer, Infinity Fabric) when ``tp <= gpus_per_node``, else the
        inter-node network; pipeline stages use the inter-node network once the replica spans
        nodes.
        """
        g, c, cfg = self.gpu, self.config, self.cfg
        intra = (cfg.collective(LinkKind(g.link).value), g.link_gb_s * _GIGA)
        inter = (cfg.collective("internode"), g.internode_gb_s * _GIGA)
        ar, ar_bw = inter if c.tp > g.gpus_per_node else intra
        sr, sr_bw = inter if c.gpus > g.gpus_per_node else intra
        return (*ar.allreduce_terms(c.tp, ar_bw), *sr.sendrecv_terms(sr_bw))

    @cached_property
    def _consts(self) -> tuple[float, ...]:
        """Scalars of the hot path, computed once per (gpu, model, config, cfg)."""
        m, c, e, p, g = self.model, self.config, self._eff, self._params, self.gpu
        hbm = g.hbm_tb_s * _TERA * e.memory
        bpp = c.quant.bytes_per_param
        bf16 = g.bf16_tflops * _TERA
        ov = self.cfg.engine_profile(c.engine)
        ar_fixed, ar_byte, sr_fixed, sr_byte = self._collectives
        if c.tp > 1:
            ar_fixed += e.allreduce_sync_us * 1e-6 * math.ceil(math.log2(c.tp))
        eager = 0.0 if c.cuda_graphs else ov.eager_launch_us_per_layer * 1e-6 * m.layers
        # FP8 tensor cores may reach a different share of their peak than BF16 ones (Ada).
        on_fp8 = self._gemm_format == "fp8"
        return (
            float(c.tp),
            float(c.pp),
            e.fp8_gemm if on_fp8 and e.fp8_gemm > 0 else e.gemm,
            e.gemm_half_tokens,
            self.gemm_peak_flops,
            p.shared_linear * bpp / (c.tp * hbm),  # dense weight streaming time
            p.expert_each * bpp / (c.tp * hbm),  # one expert's streaming time
            4.0 * m.layers * m.heads * m.head_dim / (c.tp * bf16 * e.attention),
            self._kv_bytes_per_token / (self._kv_shards * hbm),
            p.lm_head * 2.0 / (c.tp * hbm),
            bf16,
            ar_fixed,
            ar_byte * m.hidden * 2.0,  # activations are BF16
            sr_fixed,
            sr_byte * m.hidden * 2.0,
            ov.base_ms * 1e-3,
            ov.per_seq_ms * 1e-3,
            eager,
            e.decode_attention_units / self._kv_heads_per_gpu,  # sequences that fill the GPU
            # Sampling: each emitting sequence's logits over the vocabulary pass through HBM.
            m.vocab * ov.sampling_bytes_per_logit / hbm,
        )

    def _parts(
        self, prefill_tokens: int, prefill_pairs: float, decode_seqs: int, ctx_tokens: int
    ) -> tuple[tuple[float, float, float, float, float], ...]:
        """(compute, memory, comm, bubble, overhead) seconds per operation, as plain floats."""
        m, p = self.model, self._params
        (tp, pp, g_eff, g_half, peak, w_dense, w_expert, attn_k, kv_k, lm_mem, bf16, ar_lat,
         ar_byte, pp_lat, pp_byte, ov_base, ov_seq, eager, fill, logit) = self._consts  # fmt: skip
        tokens = prefill_tokens + decode_seqs
        emitting = decode_seqs + (1 if prefill_tokens else 0)
        mb = _micro_batches(pp, emitting)
        micro = tokens / mb  # tokens per micro-batch

        def eff(x: float) -> float:
            return g_eff * x / (x + g_half) if x > 0 else g_eff

        # Dense GEMMs: every token multiplies the shared weights; weights stream once per slot.
        gemm = (
            2.0 * tokens * p.shared_linear / (mb * tp * peak * eff(micro)),
            w_dense,
            0.0,
            0.0,
            0.0,
        )
        # MoE: FLOPs scale with experts per token, bytes with the distinct experts touched.
        moe = (0.0, 0.0, 0.0, 0.0, 0.0)
        if m.is_moe and tokens > 0:
            k = m.experts_per_token
            touched = _distinct_experts(micro, m.experts, k)
            per_expert = micro * k / max(touched, 1e-9)
            moe = (
                2.0 * tokens * k * p.expert_each / (mb * tp * peak * eff(per_expert)),
                touched * w_expert,
                0.0,
                0.0,
                0.0,
            )
        # Attention in BF16: quadratic prefill pairs, decode reads every context token's KV
        # (prefill writes its KV once); a small decode batch cannot fill the GPU.
        attention = (
            attn_k * (prefill_pairs + ctx_tokens) / mb,
            kv_k * (ctx_tokens * _kv_fill(fill, decode_seqs / mb) + prefill_tokens) / mb,
            0.0,
            0.0,
            0.0,
        )
        # LM head: only sequences that emit a token this step.
        lm_head = (
            2.0 * emitting * p.lm_head / (tp * bf16 * eff(emitting)) if emitting else 0.0,
            lm_mem + emitting * logit if emitting else 0.0,
            0.0,
            0.0,
            0.0,
        )
        # Tensor parallel: two all-reduces of the activations per layer per micro-batch.
        comm = 2.0 * m.layers * (ar_lat + ar_byte * micro) if tp > 1 and tokens > 0 else 0.0
        allreduce = (0.0, 0.0, comm, 0.0, 0.0)
        # Pipeline: activations cross pp-1 boundaries per micro-batch; stages are imbalanced.
        sendrecv = bubble = (0.0, 0.0, 0.0, 0.0, 0.0)
        core = sum(max(x[0], x[1]) for x in (gemm, moe, attention, lm_head))
        if pp > 1 and tokens > 0:
            sendrecv = (0.0, 0.0, (pp - 1) * (pp_lat + micro * pp_byte), 0.0, 0.0)
            bubble = (0.0, 0.0, 0.0, self.cfg.pp_imbalance * (pp - 1) / pp * core, 0.0)
        launch = _launch_cost(eager, core + comm + sendrecv[2]) if tokens > 0 else 0.0
        overhead = (0.0, 0.0, 0.0, 0.0, ov_base + ov_seq * emitting + launch)
        return gemm, moe, attention, lm_head, allreduce, sendrecv, bubble, overhead

    def breakdown(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> dict[str, StepTime]:
        """Per-operation step time of one iteration (same inputs as :meth:`step`).

        Keys: ``gemm``, ``moe_experts``, ``attention``, ``lm_head``, ``tp_allreduce``,
        ``pp_sendrecv``, ``pp_bubble``, ``overhead``.
        """
        parts = self._parts(prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens)
        return {name: StepTime(*x) for name, x in zip(_OPS, parts, strict=True)}

    @cached_property
    def _shapes(self) -> dict[tuple[int, int], _Shape]:
        # A memo of :meth:`_shape_terms` for the last few shapes (the replays' step cache
        # probes each shape three times in a row).
        return {}

    def _shape_terms(self, prefill_tokens: int, decode_seqs: int) -> _Shape:
        """Everything of a step that depends on its batch shape only, in the order
        :meth:`step` adds it up: micro-batches, GEMM and MoE compute, memory and their
        bound, the KV read's fill factor, the LM head's compute (``None`` when nothing
        samples), collectives and the fixed overhead."""
        m, p = self.model, self._params
        (tp, pp, g_eff, g_half, peak, w_dense, w_expert, _, _, lm_mem, bf16, ar_lat,
         ar_byte, pp_lat, pp_byte, ov_base, ov_seq, _, fill, logit) = self._consts  # fmt: skip
        tokens = prefill_tokens + decode_seqs
        emitting = decode_seqs + (1 if prefill_tokens else 0)
        mb = _micro_batches(pp, emitting)
        micro = tokens / mb
        eff = g_eff * micro / (micro + g_half) if micro > 0 else g_eff
        compute = 2.0 * tokens * p.shared_linear / (mb * tp * peak * eff)
        memory = w_dense
        core = max(compute, memory)
        if p.experts and tokens > 0:
            k = m.experts_per_token
            touched = _distinct_experts(micro, m.experts, k)
            x = micro * k / max(touched, 1e-9)
            c_moe = 2.0 * tokens * k * p.expert_each / (mb * tp * peak * (g_eff * x / (x + g_half)))
            m_moe = touched * w_expert
            compute += c_moe
            memory += m_moe
            core += max(c_moe, m_moe)
        c_lm = None
        m_lm = lm_mem + emitting * logit
        if emitting:
            c_lm = (
                2.0 * emitting * p.lm_head / (tp * bf16 * (g_eff * emitting / (emitting + g_half)))
            )
        comm = 2.0 * m.layers * (ar_lat + ar_byte * micro) if tp > 1 and tokens > 0 else 0.0
        if pp > 1 and tokens > 0:
            comm += (pp - 1) * (pp_lat + micro * pp_byte)
        overhead = ov_base + ov_seq * emitting
        fill_factor = _kv_fill(fill, decode_seqs / mb)
        return mb, compute, memory, core, fill_factor, c_lm, m_lm, comm, overhead, tokens > 0

    def step_parts(
        self,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepParts:
        """:meth:`step`'s fields as a tuple: the hot path of every replay and closed form.

        The same arithmetic as :meth:`breakdown` (a test checks they agree), summed inline
        without the per-operation objects; what depends on the batch shape alone is memoized
        per shape.
        """
        shapes = self._shapes
        key = (prefill_tokens, decode_seqs)
        shape = shapes.get(key)
        if shape is None:
            if len(shapes) >= _SHAPE_MEMO:
                shapes.clear()  # a memo, not state: start over rather than grow
            shape = shapes[key] = self._shape_terms(prefill_tokens, decode_seqs)
        mb, compute, memory, core, fill_factor, c_lm, m_lm, comm, overhead, busy = shape
        (_, pp, _, _, _, _, _, attn_k, kv_k, _, _, _, _, _, _, _, _, eager, _, _) = self._consts
        c_att = attn_k * (prefill_pairs + decode_context_tokens) / mb
        kv_read = decode_context_tokens * fill_factor
        m_att = kv_k * (kv_read + prefill_tokens) / mb
        compute += c_att
        memory += m_att
        core += max(c_att, m_att)
        if c_lm is not None:
            compute += c_lm
            memory += m_lm
            core += max(c_lm, m_lm)
        bubble = 0.0
        if pp > 1 and busy:
            bubble = self.cfg.pp_imbalance * (pp - 1) / pp * core
        if eager > 0.0 and busy:
            overhead += _launch_cost(eager, core + comm)
        return (compute, memory, comm, bubble, overhead)


def _launch_cost(launch: float, gpu: float) -> float:
    """Time eager-mode kernel launches add to a step whose GPU work takes ``gpu`` seconds.

    Launches overlap the GPU work only once kernels outlast them: ``L·L/(L + G)`` is the whole
    launch time ``L`` for tiny kernels (small-batch decode is launch-bound) and fades as the
    GPU work ``G`` grows.
    """
    return launch * launch / (launch + gpu) if launch > 0.0 else 0.0


def _kv_fill(fill: float, seqs: float) -> float:
    """Slow-down of decode attention's KV read when ``seqs`` sequences cannot fill the GPU.

    Decode attention runs one unit of work per (sequence, KV head); ``fill`` sequences per
    micro-batch are needed to stream the KV cache at full efficiency, fewer stream it at
    ``seqs / fill`` of it (each unit has a bounded bandwidth of its own).
    """
    return fill / seqs if 0.0 < seqs < fill else 1.0


def _micro_batches(pp: float, seqs: int) -> float:
    """Micro-batches in flight: one per pipeline stage, but never more than sequences.

    A lone prompt traverses the stages one after the other, so its step is not ``pp`` times
    shorter than on one stage: only ``min(pp, seqs)`` micro-batches overlap.
    """
    return float(min(pp, max(seqs, 1)))


_OPS = (
    "gemm",
    "moe_experts",
    "attention",
    "lm_head",
    "tp_allreduce",
    "pp_sendrecv",
    "pp_bubble",
    "overhead",
)
