"""Optional backend: step times from aiconfigurator-core's measured operator data (extra ``aic``).

``AicProfiles`` is a :class:`~koi.surrogate.ProfileSource`.  It covers the (GPU, model) pairs
for which aiconfigurator-core ships measured operator tables and a model config; elsewhere the
:class:`~koi.surrogate.Surrogate` substitutes the nearest covered architecture on the same GPU,
or falls back to the built-in operator model.  aiconfigurator-core is imported lazily; nothing
here runs unless an ``AicProfiles`` is used.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Mapping
from typing import Any

import attrs

from koi.errors import PluginError
from koi.surrogate._config import SurrogateConfig
from koi.surrogate._operator import OperatorModel
from koi.surrogate.replay._step import StepTime, StepTimeModel
from koi.types import Config, GpuSpec, ModelSpec, Quant

__all__ = ["AIC_GPUS", "AIC_MODELS", "AicProfiles", "AicStepModel", "aic_available"]

# koi catalog GPU -> aiconfigurator-core system with measured tables (0.12.0).
AIC_GPUS: Mapping[str, str] = {
    "A100-80GB": "a100_sxm",
    "B200": "b200_sxm",
    "H100-SXM": "h100_sxm",
    "H200": "h200_sxm",
    "L40S": "l40s",
    "RTXPRO6000": "rtx_pro_6000_server",
}
# koi catalog model -> aiconfigurator-core model config (Hugging Face id).
AIC_MODELS: Mapping[str, str] = {
    "Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "Mixtral-8x7B": "mistralai/Mixtral-8x7B-v0.1",
    "Llama-4-Scout-17B-16E": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
}
_ENGINES = ("vllm", "sglang", "trtllm")
_GEMM_QUANT = {Quant.BF16: None, Quant.FP8: "fp8"}


def aic_available() -> bool:
    """Whether aiconfigurator-core can be imported."""
    try:
        import aiconfigurator_core.sdk.engine  # noqa: F401
    except ImportError:
        return False
    return True


@attrs.frozen
class AicStepModel:
    """A :class:`StepTimeModel` whose totals come from an aiconfigurator-core engine.

    aiconfigurator reports only the wall time of an iteration; its split into compute,
    memory, communication, bubble and overhead is borrowed from the built-in operator model
    at the same inputs, scaled to the measured total, so every mediator stays live.
    """

    handle: Any = attrs.field(eq=False)
    builtin: OperatorModel

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        ours = self.builtin.step(
            prefill_tokens=prefill_tokens,
            prefill_pairs=prefill_pairs,
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )
        try:
            if prefill_tokens > 0:
                # A slice of c tokens at offset o has c(o + c/2) pairs: o + c = pairs/c + c/2.
                isl = max(int(prefill_pairs / prefill_tokens + prefill_tokens / 2), 1)
                ms = float(self.handle.mixed_step_latency(prefill_tokens, decode_seqs, isl, 2))
            elif decode_seqs > 0:
                ctx = max(decode_context_tokens // decode_seqs, 1)
                ms = float(self.handle.decode_step_latency(decode_seqs, ctx, 2))
            else:
                return ours
        except Exception:
            return ours
        if not ms > 0:
            return ours
        total = ours.time_s
        f = ms * 1e-3 / total if total > 0 else 1.0
        return ours.scaled(compute=f, memory=f, comm=f, bubble=f, overhead=f)


class AicProfiles:
    """Measured profiles from aiconfigurator-core on the GPUs and models it covers.

    Covered GPUs: ``A100-80GB, B200, H100-SXM, H200, L40S, RTXPRO6000`` (L4, A10G and MI300X
    have no measured tables in aiconfigurator-core 0.12.0).  Engines ``vllm``, ``sglang`` and
    ``trtllm``; BF16 and FP8 weights.  Other configs use the built-in model.
    """

    name = "aic"

    def __init__(self, cfg: SurrogateConfig | None = None) -> None:
        if not aic_available():
            raise PluginError("aic", "aiconfigurator-core is not installed (pip install koi[aic])")
        self.cfg = cfg or SurrogateConfig()
        self._handles: dict[tuple[str, str, str, int, int, str | None], Any] = {}

    def covers(self, gpu: GpuSpec, model: ModelSpec) -> bool:
        return gpu.name in AIC_GPUS and model.name in AIC_MODELS

    def _handle(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> Any | None:
        engine = config.engine.lower()
        quant = _GEMM_QUANT.get(config.quant, "unsupported")
        if engine not in _ENGINES or quant == "unsupported":
            return None
        key = (AIC_GPUS[gpu.name], AIC_MODELS[model.name], engine, config.tp, config.pp, quant)
        if key not in self._handles:
            from aiconfigurator_core.sdk.engine import EngineHandle

            kwargs: dict[str, Any] = {"tp_size": config.tp, "pp_size": config.pp}
            if quant is not None:
                kwargs["gemm_quant_mode"] = quant
            if model.is_moe:
                kwargs["moe_tp_size"] = config.tp
                if quant is not None:
                    kwargs["moe_quant_mode"] = quant
            quiet = logging.getLogger("aiconfigurator_core")
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    handle: Any = EngineHandle.compile(key[1], key[0], engine, **kwargs)
            except Exception:
                handle = None
            finally:
                quiet.setLevel(level)
            self._handles[key] = handle
        return self._handles[key]

    def step_model(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> StepTimeModel:
        builtin = OperatorModel(gpu, model, config, cfg=self.cfg)
        handle = self._handle(gpu, model, config) if self.covers(gpu, model) else None
        if handle is None:
            return builtin
        return AicStepModel(handle, builtin)
