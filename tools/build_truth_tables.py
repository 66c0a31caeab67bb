"""Build the simulated fleet's measured kernel tables (``src/koi/sim/data/kernels.npz``).

Run once, with aiconfigurator-core, pandas and pyarrow installed (not needed at run time)::

    python -m venv .aic-venv && .aic-venv/bin/pip install aiconfigurator-core==0.12.0 pandas pyarrow
    .aic-venv/bin/python tools/build_truth_tables.py            # writes src/koi/sim/data/

The source is the per-operator latency data that NVIDIA's aiconfigurator-core (Apache-2.0)
ships under ``aiconfigurator_core/systems/data/<system>/<op>/<engine>/<version>/*.parquet``:
kernels timed on real GPUs under each serving engine.  For every GPU system and engine the
newest collected version is used, and the script keeps only what the world composes a step
from, resampled on fixed grids and stored as float16 natural-log latencies (milliseconds):

* ``gemm|<sys>|<engine>|<dtype>``: GEMM latency ``[m, n, k]`` for ``bf16`` and ``fp8``
  (per-tensor scaled; the fastest kernel source the engine offers for that dtype);
* ``ctx|<sys>|<engine>|hd<d>``: context (prefill) attention ``[batch, isl, heads]``, BF16 KV,
  no sliding window, geometric mean over the measured KV-head counts of each head count;
* ``gen|<sys>|<engine>|hd<d>``: generation (decode) attention ``[batch, context, kv heads]``,
  BF16 KV, no window, geometric mean over query heads 2-8x the KV heads; cells beyond the
  measured contexts are extended linearly in context (decode attention streams the KV cache);
* ``moe|<sys>|<engine>|<dtype>|<hidden>x<inter>x<topk>x<experts>``: fused-MoE latency
  ``[tokens, moe_tp]`` (expert parallelism 1, the ``power_law_1.01`` token distribution where
  measured, else ``balanced``; FP8 is the fastest of the per-tensor and block-scaled kernels);
* ``nccl|<sys>``: NCCL all-reduce ``[gpus, message bytes]`` (FP16);
* ``car|<sys>|<engine>|graph`` / ``|eager``: the engine's custom all-reduce ``[gpus, bytes]``
  (TensorRT-LLM has one kernel: stored as ``graph``).

Grids are stored as ``grid|<name>``; ``meta`` is a JSON string naming the source file of every
table.  The package's end-to-end ``silicon_sample.csv`` is deliberately not used.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

SYSTEMS = ("h100_sxm", "h200_sxm", "a100_sxm", "l40s", "rtx_pro_6000_server", "b200_sxm")
ENGINES = ("vllm", "sglang", "trtllm")
GEMM_M = (1, 2, 3, 4, 6, 8, 12, 16, 32, 48, 64, 96, 128, 160, 192, 256, 512, 768, 1024, 1536,
          2048, 3072, 4096, 8192, 16384, 32768)  # fmt: skip
GEMM_NK = (128, 256, 512, 768, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168,
           8192, 10240, 12288, 16384, 51200, 65536)  # fmt: skip
CTX_B = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CTX_S = (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 10240, 12288,
         16384)  # fmt: skip
HEADS = (1, 2, 4, 5, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96)
GEN_B = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GEN_C = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
KV = (1, 2, 4, 8)
MOE_T = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MOE_TP = (1, 2, 4, 8)
AR_G = (2, 4, 8)
AR_BYTES = tuple(2**k for k in range(8, 30))


def _version_key(v: str) -> tuple[int, ...]:
    from packaging.version import InvalidVersion, Version

    try:
        return (*tuple(Version(v).release), 0 if Version(v).is_prerelease else 1)
    except InvalidVersion:
        return (0,)


def _newest(root: Path, system: str, op: str, engine: str, name: str) -> Path | None:
    base = root / system / op / engine
    if not base.is_dir():
        return None
    found = [d for d in base.iterdir() if (d / name).is_file()]
    if not found:
        return None
    return max(found, key=lambda d: _version_key(d.name)) / name


def _interp_loglog(xs: np.ndarray, ys: np.ndarray, grid: tuple[int, ...]) -> np.ndarray:
    """log(y) on ``grid`` by linear interpolation in log-log; linear extrapolation at the ends."""
    order = np.argsort(xs)
    lx, ly = np.log(xs[order]), np.log(ys[order])
    lg = np.log(np.asarray(grid, dtype=float))
    out = np.interp(lg, lx, ly)
    if len(lx) >= 2:
        lo, hi = lg < lx[0], lg > lx[-1]
        s0 = (ly[1] - ly[0]) / (lx[1] - lx[0]) if lx[1] > lx[0] else 0.0
        s1 = (ly[-1] - ly[-2]) / (lx[-1] - lx[-2]) if lx[-1] > lx[-2] else 0.0
        out[lo] = ly[0] + max(s0, 0.0) * (lg[lo] - lx[0])
        out[hi] = ly[-1] + max(s1, 0.0) * (lg[hi] - lx[-1])
    return out


def _fill(arr: np.ndarray) -> np.ndarray:
    """Fill NaN cells of a log-latency array from their nearest filled neighbours, axis by axis."""
    out = arr.copy()
    for _ in range(4):
        if not np.isnan(out).any():
            break
        for ax in range(out.ndim):
            moved = np.moveaxis(out, ax, -1)
            flat = moved.reshape(-1, moved.shape[-1])
            idx = np.arange(flat.shape[1])
            for row in flat:
                ok = ~np.isnan(row)
                if ok.sum() >= 2 and (~ok).any():
                    row[~ok] = np.interp(idx[~ok], idx[ok], row[ok])
                elif ok.sum() == 1 and (~ok).any():
                    row[~ok] = row[ok][0]
            out = np.moveaxis(flat.reshape(moved.shape), -1, ax)
    return out


def _gemm(pd, path: Path, dtype: str) -> np.ndarray | None:
    d = pd.read_parquet(path)
    d = d[d.gemm_dtype == dtype]
    if d.empty:
        return None
    best = d.groupby(["m", "n", "k"]).latency.min()
    out = np.full((len(GEMM_M), len(GEMM_NK), len(GEMM_NK)), np.nan)
    nk_index = {v: i for i, v in enumerate(GEMM_NK)}
    table = best.reset_index()
    for (n, k), g in table.groupby(["n", "k"]):
        if n not in nk_index or k not in nk_index:
            continue
        out[:, nk_index[n], nk_index[k]] = _interp_loglog(
            g.m.to_numpy(float), g.latency.to_numpy(float), GEMM_M
        )
    return _fill(out)


def _attention(pd, path: Path, kind: str, head_dim: int) -> np.ndarray | None:
    d = pd.read_parquet(path)
    if "window_size" in d:
        d = d[d.window_size == 0]
    if "kv_cache_dtype" in d:
        d = d[d.kv_cache_dtype.isin(("bfloat16", "float16"))]
    d = d[d.head_dim == head_dim] if "head_dim" in d else d.iloc[0:0]
    if d.empty:
        return None
    if kind == "ctx":
        d = d.assign(ln=np.log(d.latency))
        g = d.groupby(["batch_size", "isl", "num_heads"]).ln.mean().reset_index()
        out = np.full((len(CTX_B), len(CTX_S), len(HEADS)), np.nan)
        for (b, h), rows in g.groupby(["batch_size", "num_heads"]):
            if b in CTX_B and h in HEADS:
                rows = rows[rows.isl >= 16]
                if len(rows) >= 2:
                    out[CTX_B.index(b), :, HEADS.index(h)] = _interp_loglog(
                        rows.isl.to_numpy(float), np.exp(rows.ln.to_numpy()), CTX_S
                    )
        return _fill(out)
    d = d[(d.num_heads >= 2 * d.num_key_value_heads) & (d.num_heads <= 8 * d.num_key_value_heads)]
    d = d.assign(ln=np.log(d.latency), ctx=d.isl + (d.step if "step" in d else 0))
    g = d.groupby(["batch_size", "ctx", "num_key_value_heads"]).ln.mean().reset_index()
    out = np.full((len(GEN_B), len(GEN_C), len(KV)), np.nan)
    for (b, kv), rows in g.groupby(["batch_size", "num_key_value_heads"]):
        if b in GEN_B and kv in KV and len(rows) >= 2:
            xs, ys = rows.ctx.to_numpy(float), np.exp(rows.ln.to_numpy())
            col = _interp_loglog(xs, ys, GEN_C)
            # Beyond the largest measured context: linear in context (KV streaming).
            top = xs.max()
            for j, c in enumerate(GEN_C):
                if c > top:
                    col[j] = math.log(ys[np.argmax(xs)] * c / top)
            out[GEN_B.index(b), :, KV.index(kv)] = col
    return _fill(out)


def _moe(pd, path: Path, dtypes: tuple[str, ...]) -> dict[str, np.ndarray]:
    d = pd.read_parquet(path)
    d = d[(d.moe_dtype.isin(dtypes)) & (d.moe_ep_size == 1)]
    out: dict[str, np.ndarray] = {}
    for shape, g in d.groupby(["hidden_size", "inter_size", "topk", "num_experts"]):
        dist = "power_law_1.01" if (g.distribution == "power_law_1.01").any() else "balanced"
        g = g[g.distribution == dist]
        arr = np.full((len(MOE_T), len(MOE_TP)), np.nan)
        for tp, rows in g.groupby("moe_tp_size"):
            if tp in MOE_TP and len(rows) >= 2:
                best = rows.groupby("num_tokens").latency.min()
                arr[:, MOE_TP.index(tp)] = _interp_loglog(
                    best.index.to_numpy(float), best.to_numpy(float), MOE_T
                )
        if not np.isnan(arr).all():
            out["x".join(str(int(v)) for v in shape)] = _fill(arr)
    return out


def _allreduce(pd, path: Path, backend: str | None) -> np.ndarray | None:
    d = pd.read_parquet(path)
    if "op_name" in d:
        d = d[d.op_name == "all_reduce"]
    if "nccl_dtype" in d:
        d = d[d.nccl_dtype == "half"]
    if backend is not None and "backend" in d:
        d = d[d.backend.str.endswith(backend)]
    if d.empty:
        return None
    out = np.full((len(AR_G), len(AR_BYTES)), np.nan)
    for g, rows in d.groupby("num_gpus"):
        if g in AR_G:
            best = rows.groupby("message_size").latency.min()
            out[AR_G.index(g)] = _interp_loglog(
                best.index.to_numpy(float), best.to_numpy(float), AR_BYTES
            )
    return _fill(out)


def build(root: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    import pandas as pd

    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, str] = {}

    def put(key: str, arr: np.ndarray | None, src: Path) -> None:
        if arr is None or np.isnan(arr).any():
            return
        arrays[key] = arr.astype(np.float16)
        meta[key] = str(src.relative_to(root))

    for sys_ in SYSTEMS:
        src = _newest(root, sys_, "comm", "nccl", "nccl_perf.parquet")
        if src is not None:
            put(f"nccl|{sys_}", _allreduce(pd, src, None), src)
        for eng in ENGINES:
            src = _newest(root, sys_, "gemm", eng, "gemm_perf.parquet")
            if src is not None:
                for dt, name in (("bfloat16", "bf16"), ("fp8", "fp8")):
                    put(f"gemm|{sys_}|{eng}|{name}", _gemm(pd, src, dt), src)
            for kind, fname in (
                ("ctx", "context_attention_perf.parquet"),
                ("gen", "generation_attention_perf.parquet"),
            ):
                src = _newest(root, sys_, "attention", eng, fname)
                if src is not None:
                    for hd in (64, 128):
                        put(f"{kind}|{sys_}|{eng}|hd{hd}", _attention(pd, src, kind, hd), src)
            src = _newest(root, sys_, "moe", eng, "moe_perf.parquet")
            if src is not None:
                for dts, name in ((("bfloat16",), "bf16"), (("fp8", "fp8_block"), "fp8")):
                    for shape, arr in _moe(pd, src, dts).items():
                        put(f"moe|{sys_}|{eng}|{name}|{shape}", arr, src)
            src = _newest(root, sys_, "comm", eng, "custom_allreduce_perf.parquet")
            if src is not None:
                if eng == "trtllm":
                    put(f"car|{sys_}|{eng}|graph", _allreduce(pd, src, None), src)
                else:
                    for mode in ("graph", "eager"):
                        put(f"car|{sys_}|{eng}|{mode}", _allreduce(pd, src, mode), src)
    grids = {
        "gemm_m": GEMM_M,
        "gemm_nk": GEMM_NK,
        "ctx_b": CTX_B,
        "ctx_s": CTX_S,
        "heads": HEADS,
        "gen_b": GEN_B,
        "gen_c": GEN_C,
        "kv": KV,
        "moe_t": MOE_T,
        "moe_tp": MOE_TP,
        "ar_g": AR_G,
        "ar_bytes": AR_BYTES,
    }
    for name, grid in grids.items():
        arrays[f"grid|{name}"] = np.asarray(grid, dtype=np.float64)
    return arrays, meta


def main() -> None:
    import aiconfigurator_core

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent.parent
    ap.add_argument("--out", type=Path, default=here / "src/koi/sim/data/kernels.npz")
    args = ap.parse_args()
    pkg = Path(aiconfigurator_core.__file__).parent
    root = pkg / "systems" / "data"
    arrays, meta = build(root)
    from importlib.metadata import version

    header = {"source": "aiconfigurator-core", "version": version("aiconfigurator-core")}
    arrays["meta"] = np.asarray(json.dumps({"header": header, "tables": meta}, sort_keys=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **dict(sorted(arrays.items())))
    tables = sum(1 for k in arrays if not k.startswith(("grid|", "meta")))
    print(f"{args.out}: {tables} tables, {args.out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
