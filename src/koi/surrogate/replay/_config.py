"""Every constant of the replay engine, in one frozen config."""

from __future__ import annotations

from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types.validators import fraction, non_negative_int, positive


def _open_unit(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    fraction(inst, attribute, value)
    if value in (0, 1):
        raise InvalidInput(f"{attribute.name}: must be in (0, 1), got {value!r}")


__all__ = ["ReplayConfig"]


@attrs.frozen
class ReplayConfig:
    """Knobs of :class:`~koi.surrogate.replay.ReplayEngine`.

    Attributes
    ----------
    step_affine
        Cache step times assuming every component is affine in prefill query-key pairs and in
        summed decode context for fixed token and sequence counts (true of a roofline model:
        attention FLOPs grow with the pairs, KV reads with the context).  Decode steps are then
        exact.  Turn off for a model that is not; see :class:`CachedStepModel`.
    step_resolution
        Relative spacing of the logarithmic grid of prefill token counts between which step
        times are interpolated (affine mode), or relative width of every input's buckets
        (bucket mode).
    step_floor_tokens
        Bucket mode only: below this many tokens buckets stop shrinking (about
        ``step_resolution * step_floor_tokens`` tokens wide).
    kv_watermark
        Share of the KV cache that admission keeps free, so that one admission does not force a
        preemption on the very next decode step (vLLM keeps 1 % of its blocks free the same way).
    cache_step_times
        Wrap every replica's step model in a :class:`CachedStepModel`.  Turn off for a step model
        that is stochastic per call.
    affinity_slack
        Prefix-affinity routing sends a request to the least-loaded replica that holds its
        prefix unless that replica has more than this many requests (waiting plus running) above
        the least-loaded one (SGLang's cache-aware router balances the same way, with an absolute
        threshold).
    """

    step_affine: bool = True
    step_resolution: float = attrs.field(default=0.05, validator=_open_unit)
    step_floor_tokens: float = attrs.field(default=64.0, validator=positive)
    kv_watermark: float = attrs.field(default=0.01, validator=fraction)
    cache_step_times: bool = True
    affinity_slack: int = attrs.field(default=8, validator=non_negative_int)
