"""Closed vocabularies shared by every layer."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

E = TypeVar("E", bound=enum.Enum)

__all__ = [
    "ActionKind",
    "Arrival",
    "Engine",
    "JobClass",
    "LinkKind",
    "Market",
    "Mediator",
    "Outcome",
    "Quant",
    "Routing",
]


class Market(enum.StrEnum):
    """How capacity is bought."""

    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVED = "reserved"


class LinkKind(enum.StrEnum):
    """Intra-node GPU interconnect.

    ``pcie`` has GPU peer-to-peer access (NCCL's P2P transport); ``pcie_no_p2p`` does not, so
    collectives are staged through host memory (several clouds' PCIe GPU instances).
    """

    NVLINK = "nvlink"
    PCIE = "pcie"
    PCIE_NO_P2P = "pcie_no_p2p"
    INFINITY_FABRIC = "infinity_fabric"


class Quant(enum.StrEnum):
    """Weight quantization."""

    BF16 = "bf16"
    FP8 = "fp8"
    INT4 = "int4"

    @property
    def bytes_per_param(self) -> float:
        return {Quant.BF16: 2.0, Quant.FP8: 1.0, Quant.INT4: 0.5}[self]


class Engine(enum.StrEnum):
    """Serving engines: a closed set, the ones the surrogate has step-time profiles for.

    An engine outside it could be neither predicted nor launched, so it is refused where it
    enters (a snapshot, a proposal, an LLM reply) rather than deep in a tick or a launcher.
    """

    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


class Routing(enum.StrEnum):
    """How requests are spread over the replicas of a rank.

    ``prefix_affinity`` is cache-aware routing (SGLang's router, llm-d, vLLM's production stack):
    the requests of one shared prompt prefix go to the replicas that already cache it, with the
    load evened out inside that group; for jobs without shared prefixes it is least-loaded.
    """

    ROUND_ROBIN = "round_robin"
    LEAST_LOADED = "least_loaded"
    PREFIX_AFFINITY = "prefix_affinity"


class Arrival(enum.StrEnum):
    """Request arrival process."""

    POISSON = "poisson"
    CONSTANT = "constant"
    GAMMA = "gamma"


class JobClass(enum.StrEnum):
    """Online services have latency targets; batch jobs have deadlines."""

    ONLINE = "online"
    BATCH = "batch"


class AdmissionPolicy(enum.StrEnum):
    """What the planner does with a job no candidate can serve within its target.

    ``serve_best_effort`` serves the candidate least likely to breach (on free capacity) and
    reports the job at risk; ``refuse`` defers it until a candidate meets the target.
    """

    SERVE_BEST_EFFORT = "serve_best_effort"
    REFUSE = "refuse"


class ActionKind(enum.StrEnum):
    """What a plan does with a job this tick."""

    PLACE = "place"
    RECONFIGURE = "reconfigure"
    KEEP = "keep"
    DEFER = "defer"
    STOP = "stop"


class Outcome(enum.StrEnum):
    """The five serving outcomes Y of the causal graph (paper §2.2)."""

    COST = "cost_per_mtok_usd"
    TTFT = "p99_ttft_ms"
    TPOT = "p99_tpot_ms"
    THROUGHPUT = "throughput_tok_s"
    SLO_MARGIN = "slo_margin"

    @property
    def maximized(self) -> bool:
        return self in (Outcome.THROUGHPUT, Outcome.SLO_MARGIN)


class Mediator(enum.StrEnum):
    """Runtime mediators V: each predicted by the surrogate and present in telemetry."""

    KV_CACHE_UTIL = "kv_cache_util"
    MEAN_BATCH = "mean_batch_size"
    QUEUE_DEPTH = "queue_depth"
    MEM_BW_UTIL = "mem_bw_util"
    COMPUTE_UTIL = "compute_util"
    COMM_SHARE = "comm_share"
    BUBBLE_FRACTION = "bubble_fraction"
    PREEMPTION_RATE = "preemption_rate"
    PREFILL_SHARE = "prefill_share"
    MEMORY_PRESSURE = "memory_pressure"
    PREFIX_HIT_RATE = "prefix_hit_rate"


def _coerce(kind: type[E], value: Any) -> Any:
    """A valid enum value becomes the member; anything else is left for the validator."""
    try:
        return kind(value)
    except ValueError:
        return value


# Named converters (mypy's attrs plugin wants named functions).
def to_market(value: Any) -> Market:
    return _coerce(Market, value)  # type: ignore[no-any-return]


def to_link(value: Any) -> LinkKind:
    return _coerce(LinkKind, value)  # type: ignore[no-any-return]


def to_quant(value: Any) -> Quant:
    return _coerce(Quant, value)  # type: ignore[no-any-return]


def to_engine(value: Any) -> Engine:
    return _coerce(Engine, value)  # type: ignore[no-any-return]


def to_routing(value: Any) -> Routing:
    return _coerce(Routing, value)  # type: ignore[no-any-return]


def to_arrival(value: Any) -> Arrival:
    return _coerce(Arrival, value)  # type: ignore[no-any-return]


def to_job_class(value: Any) -> JobClass:
    return _coerce(JobClass, value)  # type: ignore[no-any-return]


def to_admission(value: Any) -> AdmissionPolicy:
    return _coerce(AdmissionPolicy, value)  # type: ignore[no-any-return]


def to_action(value: Any) -> ActionKind:
    return _coerce(ActionKind, value)  # type: ignore[no-any-return]
