"""Measured step profiles and nearest-architecture substitution (DESIGN §9.5)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

import attrs

from koi.surrogate._config import SurrogateConfig
from koi.surrogate._correct import ScaledStepModel
from koi.surrogate._operator import OperatorModel
from koi.surrogate.replay._step import StepTimeModel
from koi.types import Config, GpuSpec, ModelSpec

__all__ = [
    "ProfileSource",
    "Substitution",
    "architecture_distance",
    "nearest_architecture",
    "select_step_model",
]


class ProfileSource(Protocol):
    """**Protocol:** measured step-time profiles for some (GPU, model) pairs.

    ``covers`` says whether a measured profile exists; ``step_model`` returns it.
    """

    name: str

    def covers(self, gpu: GpuSpec, model: ModelSpec) -> bool: ...

    def step_model(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> StepTimeModel: ...


def architecture_distance(a: ModelSpec, b: ModelSpec) -> float:
    """Distance between two architectures: log-ratios of size and shape, plus a MoE penalty.

    .. math::

        d = |\\ln\\tfrac{P_a}{P_b}| + |\\ln\\tfrac{A_a}{A_b}| + \\tfrac12|\\ln\\tfrac{L_a}{L_b}|
            + \\tfrac12|\\ln\\tfrac{h_a}{h_b}| + \\tfrac12|\\ln\\tfrac{kv_a}{kv_b}|
            + [moe_a \\ne moe_b]
    """
    return (
        abs(math.log(a.params_b / b.params_b))
        + abs(math.log(a.active_params_b / b.active_params_b))
        + 0.5 * abs(math.log(a.layers / b.layers))
        + 0.5 * abs(math.log(a.hidden / b.hidden))
        + 0.5 * abs(math.log(a.kv_heads / b.kv_heads))
        + (1.0 if a.is_moe != b.is_moe else 0.0)
    )


def nearest_architecture(model: ModelSpec, candidates: Iterable[ModelSpec]) -> ModelSpec | None:
    """The candidate closest to ``model`` (ties broken by name), or None if there is none."""
    pool = [c for c in candidates if c.name != model.name]
    if not pool:
        return None
    return min(pool, key=lambda c: (architecture_distance(model, c), c.name))


@attrs.frozen
class Substitution:
    """A measured profile of ``source`` standing in for ``target`` on one GPU.

    The ratios are the built-in model's target/source step-time ratios at reference shapes:
    a prefill of ``reference_seq_tokens`` tokens and a decode of 16 sequences at that context.
    """

    source: str
    prefill_ratio: float
    decode_ratio: float
    step_model: StepTimeModel


def substitute(
    gpu: GpuSpec,
    target: ModelSpec,
    source: ModelSpec,
    config: Config,
    measured: StepTimeModel,
    cfg: SurrogateConfig,
) -> Substitution:
    """Rescale ``source``'s measured profile to ``target`` by prefill and decode speed ratios."""
    ref = cfg.reference_seq_tokens
    t_model = OperatorModel(gpu, target, config, cfg=cfg)
    s_model = OperatorModel(gpu, source, config, cfg=cfg)

    def prefill(m: OperatorModel) -> float:
        return m.step(
            prefill_tokens=ref, prefill_pairs=ref * ref / 2, decode_seqs=0, decode_context_tokens=0
        ).time_s

    def decode(m: OperatorModel) -> float:
        return m.step(
            prefill_tokens=0, prefill_pairs=0.0, decode_seqs=16, decode_context_tokens=16 * ref
        ).time_s

    pr = prefill(t_model) / prefill(s_model)
    dr = decode(t_model) / decode(s_model)
    return Substitution(source.name, pr, dr, ScaledStepModel(measured, prefill=pr, decode=dr))


def select_step_model(
    gpu: GpuSpec,
    model: ModelSpec,
    config: Config,
    *,
    profiles: ProfileSource | None,
    candidates: Iterable[ModelSpec],
    cfg: SurrogateConfig,
) -> tuple[StepTimeModel, str | None]:
    """The step model for a chain and the architecture substituted for it, if any.

    A measured profile wins where ``profiles`` covers (gpu, model); where it covers the GPU for
    other models, the nearest covered architecture among ``candidates`` stands in, rescaled by
    the built-in prefill and decode ratios; elsewhere the built-in operator model is used.
    """
    if profiles is not None:
        if profiles.covers(gpu, model):
            return profiles.step_model(gpu, model, config), None
        covered = [m for m in candidates if profiles.covers(gpu, m)]
        near = nearest_architecture(model, covered)
        if near is not None:
            measured = profiles.step_model(gpu, near, config)
            sub = substitute(gpu, model, near, config, measured, cfg)
            return sub.step_model, sub.source
    return OperatorModel(gpu, model, config, cfg=cfg), None
