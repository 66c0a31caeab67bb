"""Residual corrections (DESIGN §4.5.1) and step-model wrappers that apply them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koi.surrogate.replay._step import (
    PartsFn,
    StepFromParts,
    StepParts,
    StepTimeModel,
    parts_of,
    parts_time,
)
from koi.types import Mediator, Outcome
from koi.types.validators import positive

__all__ = ["MemoStepModel", "RankCorrection", "ScaledStepModel"]


def _frozen_map(value: Any) -> tuple[tuple[Any, float], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    out = tuple(sorted(((k, float(v)) for k, v in items), key=lambda kv: str(kv[0])))
    for k, v in out:
        if not v > 0 or v == float("inf"):
            raise_invalid(k, v)
    return out


def raise_invalid(key: object, value: float) -> None:
    from koi.errors import InvalidInput

    raise InvalidInput(f"corrections[{key}]: must be a finite factor > 0, got {value!r}")


@attrs.frozen
class RankCorrection:
    """Multiplicative residual corrections learned per stratum (observed / predicted).

    ``prefill_time`` and ``decode_time`` scale the step model before the replay, so queueing
    feels them; ``outcomes`` and ``mediators`` scale the replayed results afterwards.
    """

    prefill_time: float = attrs.field(default=1.0, validator=positive)
    decode_time: float = attrs.field(default=1.0, validator=positive)
    outcomes: tuple[tuple[Outcome, float], ...] = attrs.field(default=(), converter=_frozen_map)
    mediators: tuple[tuple[Mediator, float], ...] = attrs.field(default=(), converter=_frozen_map)

    @property
    def is_identity(self) -> bool:
        return (
            self.prefill_time == 1.0
            and self.decode_time == 1.0
            and all(v == 1.0 for _, v in self.outcomes)
            and all(v == 1.0 for _, v in self.mediators)
        )

    def outcome(self, o: Outcome) -> float:
        return dict(self.outcomes).get(o, 1.0)

    def mediator(self, m: Mediator) -> float:
        return dict(self.mediators).get(m, 1.0)


# Decode-only base times a scaled step model keeps.
_DEC_MEMO = 256


@attrs.frozen
class ScaledStepModel(StepFromParts):
    """A step model whose decode part is scaled by ``decode`` and prefill part by ``prefill``.

    A mixed iteration's time ``t = t_dec + Δ`` (``Δ`` what the prefill slice adds) becomes
    ``decode·t_dec + prefill·Δ``; every component is scaled by the same overall factor.
    """

    base: StepTimeModel
    prefill: float = 1.0
    decode: float = 1.0
    _parts: PartsFn = attrs.field(
        default=attrs.Factory(lambda self: parts_of(self.base), takes_self=True),
        init=False,
        eq=False,
        hash=False,
        repr=False,
    )
    # The decode-only times of the base model by (sequences, context tokens): a closed-form
    # fixed point asks for one batch with ever other prefill, each time with the same decode.
    _dec: dict[tuple[int, int], float] = attrs.field(
        factory=dict, init=False, eq=False, hash=False, repr=False
    )

    def step_parts(
        self,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepParts:
        """:meth:`step`'s fields as a tuple (what the closed form and the step cache read)."""
        full = self._parts(prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens)
        if self.prefill == self.decode or prefill_tokens == 0:
            f = self.decode
        elif decode_seqs == 0:
            f = self.prefill
        else:
            key = (decode_seqs, decode_context_tokens)
            dec = self._dec.get(key)
            if dec is None:
                if len(self._dec) >= _DEC_MEMO:
                    self._dec.clear()  # a memo, not state: start over rather than grow
                dec = self._dec[key] = parts_time(
                    self._parts(0, 0.0, decode_seqs, decode_context_tokens)
                )
            t = parts_time(full)
            f = (self.decode * dec + self.prefill * max(t - dec, 0.0)) / t if t > 0 else 1.0
        if f == 1.0:
            return full
        return (full[0] * f, full[1] * f, full[2] * f, full[3] * f, full[4] * f)


class MemoStepModel(StepFromParts):
    """``model`` with its step times memoized by their four arguments, up to ``limit`` of them
    (then it starts over: a memo, not state; ``None``: no limit).

    The replays of one step model under different corrections probe the same grid of batch
    shapes; a :class:`ScaledStepModel` over this memo scales the uncorrected step times the
    earlier replays already computed instead of computing them again (the same values).
    """

    def __init__(self, model: StepTimeModel, limit: int | None) -> None:
        self.model = model
        self._parts = parts_of(model)
        self._limit = limit
        self._memo: dict[tuple[int, float, int, int], StepParts] = {}

    def step_parts(
        self,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepParts:
        """:meth:`step`'s fields as a tuple, memoized."""
        key = (prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens)
        hit = self._memo.get(key)
        if hit is None:
            if self._limit is not None and len(self._memo) >= self._limit:
                self._memo.clear()
            hit = self._memo[key] = self._parts(*key)
        return hit
