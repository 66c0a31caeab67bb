"""Residual corrections (DESIGN §4.5.1) and step-model wrappers that apply them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from koi.surrogate.replay import CachedStepModel, StepFromMixed, StepTuple
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

__all__ = ["MemoStepModel", "RankCorrection", "ScaledStepCache", "ScaledStepModel"]


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


@attrs.frozen(cache_hash=True)  # a dict key on the planner's hot path
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

    def factors(self) -> dict[str, float]:
        """The step-time and latency factors against the prior, by name (1.0: the prior's):
        what a report says a prediction started from."""
        return {
            "prefill_time": self.prefill_time,
            "decode_time": self.decode_time,
            Outcome.TTFT.value: self.outcome(Outcome.TTFT),
            Outcome.TPOT.value: self.outcome(Outcome.TPOT),
        }


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
        if self.prefill == self.decode:
            f = self.decode
        elif prefill_tokens == 0:
            f = self.decode
            if decode_seqs and prefill_pairs == 0.0:
                # A decode-only step: what a mixed step of the same decoders asks for next
                # (the closed form makes the two one after the other).
                self._keep_decode((decode_seqs, decode_context_tokens), parts_time(full))
        elif decode_seqs == 0:
            f = self.prefill
        else:
            key = (decode_seqs, decode_context_tokens)
            dec = self._dec.get(key)
            if dec is None:
                dec = parts_time(self._parts(0, 0.0, decode_seqs, decode_context_tokens))
                self._keep_decode(key, dec)
            f = mixed_factor(self.prefill, self.decode, parts_time(full), dec)
        if f == 1.0:
            return full
        return (full[0] * f, full[1] * f, full[2] * f, full[3] * f, full[4] * f)

    def _keep_decode(self, key: tuple[int, int], time_s: float) -> None:
        """Memoize a decode-only base time (a memo, not state: past its size it starts over)."""
        if len(self._dec) >= _DEC_MEMO:
            self._dec.clear()
        self._dec[key] = time_s


class ScaledStepCache(StepFromMixed):
    """A :class:`ScaledStepModel` answered from its base's step-time cache: the base's cached
    step, then the correction, as :class:`ScaledStepModel` applies it to a step of the base.

    One cache per uncorrected step model then serves every correction of it: a correction
    that moves each tick costs a multiplication per step instead of a new cache whose nodes,
    rows and interpolations all miss.  And it is the corrected step: a cache of the corrected
    model fits its steps as affine in prefill pairs and decode context, which they are not
    when the two factors differ (the decode share moves with both; docs/surrogate.md).
    """

    __slots__ = ("_d", "_p", "base")

    def __init__(self, base: CachedStepModel, *, prefill: float, decode: float) -> None:
        self.base = base
        self._p = prefill
        self._d = decode

    def decode(self, seqs: int, context_tokens: float) -> StepTuple:
        st = self.base.decode(seqs, context_tokens)
        return _times(st, self._d)

    def mixed(
        self, prefill_tokens: int, prefill_pairs: float, seqs: int, context_tokens: float
    ) -> StepTuple:
        st = self.base.mixed(prefill_tokens, prefill_pairs, seqs, context_tokens)
        p, d = self._p, self._d
        if p == d or prefill_tokens == 0:
            return _times(st, d)
        if seqs == 0:
            return _times(st, p)
        return _times(st, mixed_factor(p, d, st[0], self.base.decode(seqs, context_tokens)[0]))


def mixed_factor(prefill: float, decode: float, step_s: float, decode_s: float) -> float:
    """What a mixed step of ``step_s`` seconds is scaled by when its decode-only part
    (``decode_s``, the same decoders without the prefill) is scaled by ``decode`` and what the
    prefill adds by ``prefill``."""
    if not step_s > 0:
        return 1.0
    return (decode * decode_s + prefill * max(step_s - decode_s, 0.0)) / step_s


def _times(st: StepTuple, f: float) -> StepTuple:
    """Every field of a step times ``f`` (its time too: the max and sums scale with it)."""
    if f == 1.0:
        return st
    return (st[0] * f, st[1] * f, st[2] * f, st[3] * f, st[4] * f, st[5] * f)


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
