"""The contract between a step-time model and the replay engine.

The surrogate's operator model predicts step times; the simulated fleet's truth model produces
the "true" ones.  The replay engine only sees this protocol, so one engine serves both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import attrs

from koi.types.validators import non_negative

__all__ = ["PartsFn", "StepParts", "StepTime", "StepTimeModel", "parts_of", "parts_time"]

_INF = math.inf


@attrs.frozen
class StepTime:
    """Wall time of one engine iteration, split by what bounds it.

    ``compute_s`` and ``memory_s`` overlap (a kernel is bound by the larger of the two);
    collective communication, pipeline bubbles and fixed engine overhead add on top.  Every
    component must be finite and non-negative.
    """

    compute_s: float
    memory_s: float
    comm_s: float = 0.0
    bubble_s: float = 0.0
    overhead_s: float = 0.0

    def __attrs_post_init__(self) -> None:
        # One check for all five (step models build millions of these); the field validator
        # runs only to name the culprit.
        try:
            ok = (
                0.0 <= self.compute_s < _INF
                and 0.0 <= self.memory_s < _INF
                and 0.0 <= self.comm_s < _INF
                and 0.0 <= self.bubble_s < _INF
                and 0.0 <= self.overhead_s < _INF
            )
        except TypeError:
            ok = False
        if not ok:
            for field in attrs.fields(StepTime):
                non_negative(self, field, getattr(self, field.name))

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.bubble_s + self.overhead_s

    def scaled(
        self,
        *,
        compute: float = 1.0,
        memory: float = 1.0,
        comm: float = 1.0,
        bubble: float = 1.0,
        overhead: float = 1.0,
    ) -> StepTime:
        """The same step with each component multiplied by its factor."""
        return StepTime(
            compute_s=self.compute_s * compute,
            memory_s=self.memory_s * memory,
            comm_s=self.comm_s * comm,
            bubble_s=self.bubble_s * bubble,
            overhead_s=self.overhead_s * overhead,
        )


class StepTimeModel(Protocol):
    """**Protocol:** the time of one continuous-batching iteration of one replica.

    One iteration processes ``prefill_tokens`` new prompt tokens (chunked-prefill slices, 0 when
    nothing is prefilling) and one output token for each of ``decode_seqs`` running sequences
    whose contexts sum to ``decode_context_tokens``.  ``prefill_pairs`` counts the causal
    query-key pairs of the prefill slices, ``sum_i c_i * (o_i + c_i / 2)`` for a slice of ``c_i``
    tokens starting at prompt offset ``o_i``, so long prompts pay their quadratic attention.
    """

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime: ...


#: A step's five fields as a plain tuple, in :class:`StepTime`'s order (compute, memory, comm,
#: bubble, overhead): what hot loops pass around instead of millions of validated objects.
StepParts = tuple[float, float, float, float, float]

#: ``step_parts(prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens)``.
PartsFn = Callable[[int, float, int, int], StepParts]


class StepFromParts:
    """Base of a step model that computes :data:`StepParts` (``step_parts``): its
    :meth:`step` is those parts as a validated :class:`StepTime`."""

    __slots__ = ()

    def step_parts(
        self,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepParts:
        raise NotImplementedError

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        return StepTime(
            *self.step_parts(prefill_tokens, prefill_pairs, decode_seqs, decode_context_tokens)
        )


def parts_time(s: StepParts) -> float:
    """:attr:`StepTime.time_s` of a step's parts (the same operations in the same order)."""
    return max(s[0], s[1]) + s[2] + s[3] + s[4]


def parts_of(model: StepTimeModel) -> PartsFn:
    """``model``'s step times as :data:`StepParts`.

    A model may offer ``step_parts`` (positional arguments, the fields of its :meth:`step` as a
    tuple, unvalidated) for callers that make millions of steps; any other model's ``step`` is
    unpacked.  The values are the same either way.
    """
    fast: PartsFn | None = getattr(model, "step_parts", None)
    if fast is not None:
        return fast

    def parts(
        prefill_tokens: int, prefill_pairs: float, decode_seqs: int, decode_context_tokens: int
    ) -> StepParts:
        st = model.step(
            prefill_tokens=prefill_tokens,
            prefill_pairs=prefill_pairs,
            decode_seqs=decode_seqs,
            decode_context_tokens=decode_context_tokens,
        )
        return (st.compute_s, st.memory_s, st.comm_s, st.bubble_s, st.overhead_s)

    return parts
