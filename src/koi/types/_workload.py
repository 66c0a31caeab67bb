"""Workloads, serving targets, objective weights and jobs."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types._deploy import Config, Ladder
from koi.types._enums import (
    AdmissionPolicy,
    Arrival,
    JobClass,
    Outcome,
    Quant,
    to_admission,
    to_arrival,
    to_job_class,
    to_quant,
)
from koi.types.validators import (
    fraction,
    identifier,
    int_in,
    non_negative,
    non_negative_int,
    number_in,
    one_of,
    optional,
    positive,
    positive_int,
)

__all__ = [
    "DEFAULT_PRECISIONS",
    "MAX_PRIORITY",
    "MIN_BATCH_WINDOW_S",
    "Job",
    "LengthDist",
    "ObjectiveWeights",
    "ServingTarget",
    "WorkloadProfile",
    "config_precision_verdict",
    "precision_verdict",
    "to_precisions",
]

# Priorities are levels, not weights: a million of them is plenty, and the selector keeps them
# in 64-bit integers.
MAX_PRIORITY = 1_000_000
#: Bounds far past any real value (a log-normal CV of 100; a weight a million times another's):
#: what lies beyond is a typo that would overflow inside a tick.
MAX_CV = 100.0
MAX_WEIGHT = 1e6
_WEIGHT = [non_negative, number_in(0.0, MAX_WEIGHT)]

#: What a job accepts unless its owner says otherwise: BF16 and FP8 weights.  INT4 changes a
#: model's answers more than FP8 does, so it is used only where the owner lists it.
DEFAULT_PRECISIONS: tuple[Quant, ...] = (Quant.BF16, Quant.FP8)


@attrs.frozen(cache_hash=True)  # a dict key on the planner's hot path
class LengthDist:
    """A token-length distribution: log-normal with this mean and coefficient of variation,
    truncated to ``[1, max]``."""

    mean: float = attrs.field(validator=positive)
    cv: float = attrs.field(default=0.0, validator=[non_negative, number_in(0.0, MAX_CV)])
    max: int = attrs.field(default=1_000_000, validator=positive_int)

    def __attrs_post_init__(self) -> None:
        if self.mean > self.max:
            raise InvalidInput(f"mean: must be <= max ({self.max}), got {self.mean}")


@attrs.frozen(cache_hash=True)
class WorkloadProfile:
    """The paper's ``W_i``.

    Online jobs set ``rate_rps`` (mean requests per second).  Batch jobs set
    ``total_requests`` and are served as fast as their ladder allows (closed loop).

    Shared prompt prefixes (system prompts, RAG templates, agent tool preambles): every prompt
    starts with one of ``prefix_count`` distinct prefixes of :attr:`shared_prefix_tokens`
    tokens, drawn anew per request.  The length is ``prefix_tokens`` when given, else
    ``prefix_share`` of the mean prompt; the defaults (share 0, one prefix) mean no sharing,
    which is what every workload without these fields meant before prefix caching was modelled.
    """

    input_len: LengthDist
    output_len: LengthDist
    arrival: Arrival = attrs.field(
        default=Arrival.POISSON, converter=to_arrival, validator=one_of(Arrival)
    )
    rate_rps: float | None = attrs.field(default=None, validator=optional(positive))
    total_requests: int | None = attrs.field(default=None, validator=optional(positive_int))
    gamma_cv: float = attrs.field(default=1.0, validator=positive)
    prefix_share: float = attrs.field(default=0.0, validator=fraction)
    prefix_tokens: int | None = attrs.field(default=None, validator=optional(positive_int))
    prefix_count: int = attrs.field(default=1, validator=positive_int)

    def __attrs_post_init__(self) -> None:
        if self.prefix_tokens is not None and self.prefix_tokens >= self.input_len.max:
            msg = (
                f"prefix_tokens: must be < the longest prompt ({self.input_len.max}), "
                f"got {self.prefix_tokens}"
            )
            raise InvalidInput(msg)

    @property
    def shared_prefix_tokens(self) -> int:
        """Tokens at the start of each prompt shared with other requests (0: none)."""
        if self.prefix_tokens is not None:
            return self.prefix_tokens
        return round(self.prefix_share * self.input_len.mean)

    @property
    def offered_output_tok_s(self) -> float:
        """Mean output tokens per second offered by an online workload (0 for batch)."""
        return (self.rate_rps or 0.0) * self.output_len.mean


@attrs.frozen(cache_hash=True)
class ServingTarget:
    """The paper's ``S_i``: p99 latency bounds for online jobs, a deadline for batch jobs.

    ``deadline_s`` is absolute simulated/host time in seconds.
    """

    p99_ttft_ms: float | None = attrs.field(default=None, validator=optional(positive))
    p99_tpot_ms: float | None = attrs.field(default=None, validator=optional(positive))
    deadline_s: float | None = attrs.field(default=None, validator=optional(non_negative))

    @classmethod
    def online(cls, *, p99_ttft_ms: float, p99_tpot_ms: float) -> ServingTarget:
        return cls(p99_ttft_ms=p99_ttft_ms, p99_tpot_ms=p99_tpot_ms)

    @classmethod
    def batch(cls, *, deadline_s: float) -> ServingTarget:
        return cls(deadline_s=deadline_s)

    @property
    def due_s(self) -> float:
        """The deadline, or infinity where there is none (a deadline at time 0 is one)."""
        return math.inf if self.deadline_s is None else self.deadline_s


@attrs.frozen
class ObjectiveWeights:
    """Relative importance of the five outcomes for one job (need not sum to one)."""

    cost: float = attrs.field(default=1.0, validator=_WEIGHT)
    ttft: float = attrs.field(default=1.0, validator=_WEIGHT)
    tpot: float = attrs.field(default=1.0, validator=_WEIGHT)
    throughput: float = attrs.field(
        default=1.0, validator=[non_negative, number_in(0.0, MAX_WEIGHT)]
    )
    slo_margin: float = attrs.field(
        default=1.0, validator=[non_negative, number_in(0.0, MAX_WEIGHT)]
    )

    def __attrs_post_init__(self) -> None:
        if not any(attrs.astuple(self)):
            raise InvalidInput("weights: at least one objective weight must be > 0")

    def of(self, outcome: Outcome) -> float:
        return {
            Outcome.COST: self.cost,
            Outcome.TTFT: self.ttft,
            Outcome.TPOT: self.tpot,
            Outcome.THROUGHPUT: self.throughput,
            Outcome.SLO_MARGIN: self.slo_margin,
        }[outcome]


#: The shortest window a batch job's required rate is spread over (seconds).
MIN_BATCH_WINDOW_S = 60.0


def precision_verdict(quant: Quant, accepted: Collection[Quant]) -> str | None:
    """The precision rule: ``None`` when ``accepted`` holds ``quant``, else why it does not."""
    if quant in accepted:
        return None
    names = ", ".join(q.value for q in Quant if q in accepted)
    return f"{quant.value} is outside the accepted precisions ({names})"


def config_precision_verdict(config: Config, accepted: Collection[Quant]) -> str | None:
    """The precision rule for one serving config: its weights, and its KV cache when that is
    quantized (``kv_cache_dtype = "fp8"`` needs FP8 accepted; ``auto`` keeps the activations'
    BF16 and is never refused)."""
    weights = precision_verdict(config.quant, accepted)
    if weights is not None:
        return weights
    if config.kv_cache_dtype == "fp8":
        kv = precision_verdict(Quant.FP8, accepted)
        if kv is not None:
            return f"KV cache {kv}"
    return None


def to_precisions(value: Any) -> tuple[Quant, ...]:
    """Converter: any iterable of precision names becomes a duplicate-free tuple in the
    canonical order (bf16, fp8, int4); anything else is left for the validator to name."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        return value  # type: ignore[no-any-return]
    items = [to_quant(v) for v in value]
    if not all(isinstance(q, Quant) for q in items):
        return tuple(items)
    return tuple(q for q in Quant if q in items)


def _precision_set(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    choices = ", ".join(q.value for q in Quant)
    if not isinstance(value, tuple) or not value or not all(isinstance(q, Quant) for q in value):
        msg = f"{attribute.name}: must be a non-empty list of {choices}, got {value!r}"
        raise InvalidInput(msg)


@attrs.frozen
class Job:
    """One LLM job: a model, a workload, a class and its serving target.

    ``completed_requests`` is the host's progress count for batch jobs (0 for online jobs).
    ``precisions`` are the weight (and quantized KV-cache) precisions the job's owner accepts
    (default :data:`DEFAULT_PRECISIONS`: BF16 and FP8; INT4 only when listed).  A ladder with
    any other precision is infeasible for the job (C2); see :meth:`precision_problem`.
    ``admission`` says what the planner does when no candidate can meet the target: serve the
    least risky one and report the job at risk (the default), or refuse (defer) it.
    """

    id: str = attrs.field(validator=identifier)
    model: str = attrs.field(validator=identifier)
    job_class: JobClass = attrs.field(converter=to_job_class, validator=one_of(JobClass))
    workload: WorkloadProfile
    target: ServingTarget
    tenant: str = attrs.field(default="default", validator=identifier)
    weights: ObjectiveWeights = attrs.field(factory=ObjectiveWeights)
    priority: int = attrs.field(default=0, validator=int_in(0, MAX_PRIORITY))
    arrival_s: float = attrs.field(default=0.0, validator=non_negative)
    quota_group: str | None = None
    completed_requests: int = attrs.field(default=0, validator=non_negative_int)
    precisions: tuple[Quant, ...] = attrs.field(
        default=DEFAULT_PRECISIONS, converter=to_precisions, validator=_precision_set
    )
    admission: AdmissionPolicy = attrs.field(
        default=AdmissionPolicy.SERVE_BEST_EFFORT,
        converter=to_admission,
        validator=one_of(AdmissionPolicy),
    )

    def __attrs_post_init__(self) -> None:
        w, t = self.workload, self.target
        if self.job_class is JobClass.ONLINE:
            if w.rate_rps is None:
                raise InvalidInput("workload.rate_rps: required for an online job")
            if t.p99_ttft_ms is None or t.p99_tpot_ms is None:
                raise InvalidInput("target: an online job needs p99_ttft_ms and p99_tpot_ms")
        else:
            if w.total_requests is None:
                raise InvalidInput("workload.total_requests: required for a batch job")
            if t.deadline_s is None:
                raise InvalidInput("target.deadline_s: required for a batch job")
            if self.completed_requests > w.total_requests:
                msg = (
                    f"completed_requests: must be <= total_requests ({w.total_requests}), "
                    f"got {self.completed_requests}"
                )
                raise InvalidInput(msg)

    @property
    def is_online(self) -> bool:
        return self.job_class is JobClass.ONLINE

    def accepts(self, quant: Quant) -> bool:
        """Whether the job's owner accepts weights in ``quant``."""
        return precision_verdict(quant, self.precisions) is None

    def precision_problem(self, ladder: Ladder) -> str | None:
        """Why ``ladder`` breaks the job's precision policy, or ``None`` when it does not.

        The one precision rule every planner, proposer and host check goes through.
        """
        for k, rank in enumerate(ladder.ranks):
            verdict = config_precision_verdict(rank.chain.config, self.precisions)
            if verdict is not None:
                return f"precision policy: ranks[{k}]: {verdict} of job {self.id}"
        return None

    @property
    def remaining_requests(self) -> int:
        """Batch requests still to serve (0 for online jobs)."""
        return (self.workload.total_requests or 0) - self.completed_requests

    def required_output_tok_s(self, now_s: float, *, time_share: float = 1.0) -> float:
        """The output rate the job needs: what an online workload offers, or a batch job's
        remaining output tokens over ``time_share`` of the time to its deadline — never over
        less than :data:`MIN_BATCH_WINDOW_S` (near or past the deadline the job asks for a
        minute's worth per second, not an unbounded rate).  The one rule every planner, the
        scoring and the sizing use."""
        if self.is_online:
            return self.workload.offered_output_tok_s
        left_s = (self.target.deadline_s if self.target.deadline_s is not None else now_s) - now_s
        window_s = max(left_s * time_share, MIN_BATCH_WINDOW_S)
        return self.remaining_requests * self.workload.output_len.mean / window_s
