"""Operator latencies of the simulated hardware: measured tables and a model for the rest.

Two :class:`KernelSource` s answer the same questions — how long one GEMM, one attention call,
one fused-MoE call or one all-reduce takes on one GPU under one engine:

* :class:`MeasuredKernels` reads ``data/kernels.npz``, built once by
  ``tools/build_truth_tables.py`` from the per-operator latencies that NVIDIA's
  aiconfigurator-core (Apache-2.0) ships for real GPUs (see ``data/NOTICE``), and interpolates
  them in log space (log latency linear in log size; linear extrapolation past the grid);
* :class:`UnmeasuredKernels` covers GPUs the tables lack (L4, A10G, MI300X, and any other
  catalog GPU) with its own efficiency curves: GEMM efficiency from tile fill and wave
  quantization over the GPU's SMs/CUs, attention efficiency that grows with context, and
  collectives by topology.

All latencies are in milliseconds and every method is vectorized over its first argument.
Nothing here shares code with ``koi.surrogate``: the planner's operator model never sees these
numbers.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import attrs
import numpy as np

from koi.types import GpuSpec

__all__ = [
    "MEASURED_SYSTEMS",
    "KernelSource",
    "MeasuredKernels",
    "UnmeasuredKernels",
    "kernel_source",
    "load_tables",
]

_DATA = Path(__file__).parent / "data" / "kernels.npz"

#: koi catalog GPU -> the aiconfigurator-core system whose measurements it uses.
MEASURED_SYSTEMS: Mapping[str, str] = {
    "H100-SXM": "h100_sxm",
    "H200": "h200_sxm",
    "A100-80GB": "a100_sxm",
    "L40S": "l40s",
    "RTXPRO6000": "rtx_pro_6000_server",
    "B200": "b200_sxm",
}
_ENGINES = ("vllm", "sglang", "trtllm")


@attrs.frozen
class Tables:
    """The arrays of ``kernels.npz`` (natural-log latencies in ms) and their grids."""

    arrays: Mapping[str, np.ndarray]
    grids: Mapping[str, np.ndarray]
    meta: Mapping[str, object]

    def has(self, key: str) -> bool:
        return key in self.arrays


@functools.cache
def load_tables(path: str | None = None) -> Tables:
    """Load (once) the measured kernel tables shipped in ``koi/sim/data``."""
    with np.load(Path(path) if path else _DATA) as z:
        arrays = {k: z[k].astype(np.float64) for k in z.files if "|" in k and k[:5] != "grid|"}
        grids = {k[5:]: np.log(z[k]) for k in z.files if k.startswith("grid|")}
        meta = json.loads(str(z["meta"]))
    return Tables(arrays, grids, meta)


def _axis(lg: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower index and fraction of log-positions ``x`` on the log grid ``lg`` (extrapolating)."""
    i = np.clip(np.searchsorted(lg, x, side="right") - 1, 0, len(lg) - 2)
    f = (x - lg[i]) / (lg[i + 1] - lg[i])
    return i, f


def _lerp1(lg: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    i, f = _axis(lg, x)
    return np.asarray(y[i] * (1 - f) + y[i + 1] * f)


def _grid2(
    g0: np.ndarray, g1: np.ndarray, arr: np.ndarray, x0: np.ndarray, x1: float
) -> np.ndarray:
    """Bilinear interpolation of ``arr[g0, g1]`` at (``x0`` vector, ``x1`` scalar), log space."""
    j, fj = _axis(g1, np.asarray([x1]))
    col = arr[:, j[0]] * (1 - fj[0]) + arr[:, j[0] + 1] * fj[0]
    return _lerp1(g0, col, x0)


class KernelSource(Protocol):
    """**Protocol:** operator latencies (ms) of one GPU under one engine."""

    name: str

    def gemm(self, m: np.ndarray, n: int, k: int, dtype: str) -> np.ndarray:
        """GEMM ``[m, k] x [k, n]``; ``dtype`` is ``bf16``, ``fp8`` or ``int4`` weights."""
        ...

    def prefill_attention(self, s: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
        """Causal attention of one prompt of ``s`` tokens with ``heads`` query heads."""
        ...

    def decode_attention(
        self, batch: np.ndarray, context: float, kv_heads: float, head_dim: int
    ) -> np.ndarray:
        """One decode step of ``batch`` sequences of ``context`` tokens each."""
        ...

    def moe(
        self, tokens: np.ndarray, shape: tuple[int, int, int, int], tp: int, dtype: str
    ) -> np.ndarray:
        """Fused MoE block; ``shape`` = (hidden, expert intermediate, top-k, experts)."""
        ...

    def allreduce(self, nbytes: np.ndarray, gpus: int, mode: str) -> np.ndarray:
        """All-reduce over ``gpus`` GPUs; ``mode`` is ``graph``, ``eager`` or ``nccl``."""
        ...


def _weight_only_ratio(m: np.ndarray, small: float, large: float) -> np.ndarray:
    """Time ratio of a weight-only quantized GEMM to BF16: ``small`` at m <= 16 (fewer weight
    bytes to stream) rising log-linearly to ``large`` at m >= 512 (dequantization overhead)."""
    u = np.clip((np.log(np.maximum(m, 1.0)) - math.log(16)) / math.log(32), 0.0, 1.0)
    return np.asarray(np.exp(math.log(small) * (1 - u) + math.log(large) * u))


class MeasuredKernels:
    """Log-space interpolation of aiconfigurator-core measurements for one (system, engine).

    A table missing for the engine is taken from another engine of the same GPU (kernels such
    as cuBLAS GEMMs and NCCL are shared); FP8 GEMMs on a GPU without FP8 measurements, and all
    INT4 GEMMs, are BF16 measurements times a weight-only ratio (documented in
    docs/evaluation.md).  MoE shapes that were not measured borrow the nearest measured shape,
    scaled by the geometric mean of the FLOP and weight-byte ratios.
    """

    def __init__(self, system: str, engine: str, tables: Tables | None = None) -> None:
        self.tables = tables or load_tables()
        self.system = system
        self.engine = engine if engine in _ENGINES else "vllm"
        self.name = f"measured:{system}/{self.engine}"
        self._order = (self.engine, *[e for e in _ENGINES if e != self.engine])

    def _key(self, kind: str, *rest: str) -> str | None:
        for eng in self._order:
            key = "|".join((kind, self.system, eng, *rest))
            if self.tables.has(key):
                return key
        return None

    def gemm(self, m: np.ndarray, n: int, k: int, dtype: str) -> np.ndarray:
        t = self.tables
        ratio: np.ndarray | float = 1.0
        key = self._key("gemm", dtype) if dtype == "fp8" else None
        if key is None:
            key = self._key("gemm", "bf16")
            assert key is not None, f"no GEMM table for {self.system}"
            if dtype == "fp8":
                ratio = _weight_only_ratio(m, 0.62, 1.05)
            elif dtype == "int4":
                ratio = _weight_only_ratio(m, 0.38, 1.15)
        arr = t.arrays[key]
        g_m, g_nk = t.grids["gemm_m"], t.grids["gemm_nk"]
        jn, fn = _axis(g_nk, np.asarray([math.log(max(n, 1))]))
        jk, fk = _axis(g_nk, np.asarray([math.log(max(k, 1))]))
        a, b, fa, fb = jn[0], jk[0], fn[0], fk[0]
        plane = (
            arr[:, a, b] * (1 - fa) * (1 - fb)
            + arr[:, a + 1, b] * fa * (1 - fb)
            + arr[:, a, b + 1] * (1 - fa) * fb
            + arr[:, a + 1, b + 1] * fa * fb
        )
        out = np.exp(_lerp1(g_m, plane, np.log(np.maximum(m, 1.0))))
        return np.asarray(out * ratio)

    def _attn_key(self, kind: str, head_dim: int) -> tuple[str, float]:
        key = self._key(kind, f"hd{head_dim}")
        if key is not None:
            return key, 1.0
        other = 128 if head_dim != 128 else 64
        key = self._key(kind, f"hd{other}")
        assert key is not None, f"no {kind} attention table for {self.system}"
        return key, head_dim / other

    def prefill_attention(self, s: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
        t = self.tables
        key, scale = self._attn_key("ctx", head_dim)
        arr = t.arrays[key][0]  # batch 1: [isl, heads]
        lh = math.log(max(heads, 1))
        out = np.exp(_grid2(t.grids["ctx_s"], t.grids["heads"], arr, np.log(np.maximum(s, 1)), lh))
        return np.asarray(out * scale)

    def decode_attention(
        self, batch: np.ndarray, context: float, kv_heads: float, head_dim: int
    ) -> np.ndarray:
        t = self.tables
        key, scale = self._attn_key("gen", head_dim)
        arr = t.arrays[key]  # [batch, context, kv]
        g_b, g_c, g_kv = t.grids["gen_b"], t.grids["gen_c"], t.grids["kv"]
        extra = 1.0
        kv = kv_heads
        if kv > 8:
            extra, kv = kv / 8.0, 8.0
        j, fj = _axis(g_kv, np.asarray([math.log(max(kv, 1.0))]))
        plane = arr[:, :, j[0]] * (1 - fj[0]) + arr[:, :, j[0] + 1] * fj[0]
        col = _grid2(g_b, g_c, plane, np.log(np.maximum(batch, 1)), math.log(max(context, 2.0)))
        return np.asarray(np.exp(col) * scale * extra)

    def moe(
        self, tokens: np.ndarray, shape: tuple[int, int, int, int], tp: int, dtype: str
    ) -> np.ndarray:
        t = self.tables
        want = "x".join(map(str, shape))
        h, i, k, e = shape
        best: tuple[float, str, float] | None = None
        for dt, dscale in ((dtype, 1.0), ("bf16", 0.8 if dtype != "bf16" else 1.0), ("fp8", 1.2)):
            for eng in self._order:
                prefix = f"moe|{self.system}|{eng}|{dt}|"
                exact = prefix + want
                if t.has(exact):
                    best = (0.0, exact, dscale)
                    break
                for key in t.arrays:
                    if not key.startswith(prefix):
                        continue
                    h2, i2, k2, e2 = map(int, key[len(prefix) :].split("x"))
                    flops = (h * i * k) / (h2 * i2 * k2)
                    wbytes = (h * i * e) / (h2 * i2 * e2)
                    d = abs(math.log(flops)) + abs(math.log(wbytes))
                    if best is None or d < best[0]:
                        best = (d, key, dscale * math.sqrt(flops * wbytes))
            if best is not None and best[0] == 0.0:
                break
        assert best is not None, f"no MoE table for {self.system}"
        _, key, scale = best
        arr = t.arrays[key]
        lt = math.log(max(tp, 1))
        out = _grid2(t.grids["moe_t"], t.grids["moe_tp"], arr, np.log(np.maximum(tokens, 1)), lt)
        out = np.exp(out) * scale
        if dtype != "bf16":
            # A deployment whose quantized MoE kernel is slower than BF16 would not ship it.
            out = np.minimum(out, self.moe(tokens, shape, tp, "bf16"))
        return np.asarray(out)

    def allreduce(self, nbytes: np.ndarray, gpus: int, mode: str) -> np.ndarray:
        t = self.tables
        key = None
        if mode in ("graph", "eager"):
            key = self._key("car", mode) or self._key("car", "graph")
        if key is None:
            key = f"nccl|{self.system}"
        arr = t.arrays[key]
        out = _grid2(
            t.grids["ar_bytes"], t.grids["ar_g"], arr.T, np.log(np.maximum(nbytes, 1)),
            math.log(max(gpus, 2)),
        )  # fmt: skip
        return np.asarray(np.exp(out))


@attrs.frozen
class SiliconSpec:
    """What :class:`UnmeasuredKernels` knows of a GPU without measurements.

    ``units`` are SMs (NVIDIA) or CUs (AMD); ``gemm_peak`` the achieved fraction of datasheet
    tensor throughput for a perfectly tiled large GEMM (sustained clocks under the board's
    power limit); ``mem`` the achieved fraction of HBM/GDDR bandwidth on long streams;
    ``attn`` the attention kernel's fraction of tensor peak at long context; ``launch_us`` the
    per-kernel launch latency.
    """

    units: int
    gemm_peak: float
    mem: float
    attn: float
    launch_us: float


# Sources: datasheets (SM/CU counts), public kernel benchmarks for the achieved fractions
# (L4 runs at its 72 W limit; MI300X hipBLASLt and CK flash-attention reach well below
# datasheet peak).  Any other GPU gets the generic row.
_SILICON: Mapping[str, SiliconSpec] = {
    "L4": SiliconSpec(units=58, gemm_peak=0.58, mem=0.78, attn=0.38, launch_us=5.0),
    "A10G": SiliconSpec(units=80, gemm_peak=0.64, mem=0.80, attn=0.40, launch_us=5.0),
    "MI300X": SiliconSpec(units=304, gemm_peak=0.42, mem=0.62, attn=0.30, launch_us=9.0),
}
_GENERIC = SiliconSpec(units=108, gemm_peak=0.55, mem=0.75, attn=0.38, launch_us=6.0)


class UnmeasuredKernels:
    """A separately written kernel model for GPUs without measurements.

    GEMM: ``max(flops / (peak * e), bytes / (bw * mem)) + launch`` where the efficiency ``e``
    is ``gemm_peak`` times the tile fill of the M dimension (tiles of 16/64/128 rows) times
    the wave quantization ``work / (waves * units)`` over 128-wide N tiles (K split into up to
    512-deep slices when the tiles alone cannot fill the GPU).  Prefill
    attention: causal FLOPs at ``attn * s / (s + 768)`` of peak.  Decode attention: KV bytes
    at ``mem * c / (c + 96)`` of bandwidth plus a per-sequence cost.  MoE: the routed GEMMs
    with the experts a batch touches.  All-reduce: computed by the caller's link model
    (:func:`link_allreduce`); this source only gives the launch latency.
    """

    def __init__(self, gpu: GpuSpec, engine: str) -> None:
        self.gpu = gpu
        self.engine = engine
        self.name = f"model:{gpu.name}/{engine}"
        self.si = _SILICON.get(gpu.name, _GENERIC)

    def _peak(self, dtype: str) -> float:
        g = self.gpu
        if dtype == "fp8" and g.fp8_tflops:
            return g.fp8_tflops * 1e12
        return g.bf16_tflops * 1e12  # INT4 and FP8 without FP8 units: weight-only, BF16 math

    def _wbytes(self, dtype: str) -> float:
        return {"bf16": 2.0, "fp8": 1.0, "int4": 0.5}.get(dtype, 2.0)

    def gemm(self, m: np.ndarray, n: int, k: int, dtype: str) -> np.ndarray:
        si = self.si
        m = np.maximum(np.asarray(m, dtype=float), 1.0)
        tile_m = np.where(m <= 16, 16.0, np.where(m <= 64, 64.0, 128.0))
        tiles_m = np.ceil(m / tile_m)
        fill = m / (tiles_m * tile_m)
        tiles = tiles_m * math.ceil(n / 128)
        # Too few output tiles to fill the GPU: split K (up to 512-deep slices), at a 10 %
        # reduction cost.
        split = np.clip(np.floor(si.units / tiles), 1.0, max(1.0, k / 512.0))
        work = tiles * split
        waves = np.ceil(work / si.units)
        quant = work / (waves * si.units) * np.where(split > 1, 0.9, 1.0)
        eff = si.gemm_peak * fill * quant
        flops = 2.0 * m * n * k
        compute = flops / (self._peak(dtype) * eff)
        nbytes = 2.0 * m * k + self._wbytes(dtype) * n * k + 2.0 * m * n
        memory = nbytes / (self.gpu.hbm_tb_s * 1e12 * si.mem)
        return np.asarray((np.maximum(compute, memory) + si.launch_us * 1e-6) * 1e3)

    def prefill_attention(self, s: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
        s = np.maximum(np.asarray(s, dtype=float), 1.0)
        flops = 4.0 * heads * head_dim * s * s / 2.0
        eff = self.si.attn * s / (s + 768.0)
        t = flops / (self._peak("bf16") * eff) + 2 * self.si.launch_us * 1e-6
        return np.asarray(t * 1e3)

    def decode_attention(
        self, batch: np.ndarray, context: float, kv_heads: float, head_dim: int
    ) -> np.ndarray:
        b = np.maximum(np.asarray(batch, dtype=float), 1.0)
        nbytes = b * context * kv_heads * head_dim * 2.0 * 2.0
        eff = self.si.mem * context / (context + 96.0)
        t = nbytes / (self.gpu.hbm_tb_s * 1e12 * eff) + self.si.launch_us * 1e-6 + b * 0.4e-6
        return np.asarray(t * 1e3)

    def moe(
        self, tokens: np.ndarray, shape: tuple[int, int, int, int], tp: int, dtype: str
    ) -> np.ndarray:
        h, inter, k, e = shape
        x = np.maximum(np.asarray(tokens, dtype=float), 1.0)
        routed = x * k
        touched = e * (1.0 - np.power(1.0 - 1.0 / e, routed))  # experts hit by the batch
        i_tp = inter / max(tp, 1)
        flops = 2.0 * 3.0 * routed * h * i_tp
        nbytes = touched * 3.0 * h * i_tp * self._wbytes(dtype) + 4.0 * routed * h
        compute = flops / (self._peak(dtype) * self.si.gemm_peak * 0.7)
        memory = nbytes / (self.gpu.hbm_tb_s * 1e12 * self.si.mem)
        return np.asarray((np.maximum(compute, memory) + 4 * self.si.launch_us * 1e-6) * 1e3)

    def allreduce(self, nbytes: np.ndarray, gpus: int, mode: str) -> np.ndarray:
        del mode
        nb = np.asarray(nbytes, dtype=float)
        g = max(gpus, 2)
        bw = self.gpu.link_gb_s * 1e9 * 0.7
        t = 2.0 * (g - 1) / g * nb / bw + (g - 1) * 10e-6
        return np.asarray(t * 1e3)


def kernel_source(gpu: GpuSpec, engine: str) -> KernelSource:
    """The measured tables where aiconfigurator-core measured ``gpu``, the model elsewhere."""
    system = MEASURED_SYSTEMS.get(gpu.name)
    if system is not None and load_tables().has(f"nccl|{system}"):
        return MeasuredKernels(system, engine)
    return UnmeasuredKernels(gpu, engine)
