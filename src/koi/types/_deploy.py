"""Deployment structure (paper §2.2): config -> chain -> rank -> ladder."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types._enums import Engine, Quant, Routing, to_engine, to_quant, to_routing
from koi.types._hardware import MAX_COUNT, Environment
from koi.types.validators import (
    boolean,
    fraction,
    identifier,
    int_in,
    one_of,
    optional,
    positive_int,
    to_tuple,
)

__all__ = ["KV_CACHE_DTYPES", "Chain", "Config", "Ladder", "Rank"]


def _utilization(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    fraction(inst, attribute, value)
    if value == 0:
        raise InvalidInput(f"{attribute.name}: must be in (0, 1], got {value!r}")


def _kv_dtype(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in KV_CACHE_DTYPES:
        msg = f"{attribute.name}: must be one of {', '.join(KV_CACHE_DTYPES)}, got {value!r}"
        raise InvalidInput(msg)


# "auto" stores KV in the model's activation dtype (BF16); "fp8" halves it (vLLM
# --kv-cache-dtype fp8, SGLang --kv-cache-dtype fp8_e4m3, TensorRT-LLM FP8 KV cache).
KV_CACHE_DTYPES = ("auto", "fp8")


@attrs.frozen(cache_hash=True)  # a dict key on the planner's hot path
class Config:
    """The paper's ``x``: how one model copy is served.

    The engine settings default to the engines' own defaults (vLLM's names in brackets):
    ``gpu_memory_utilization`` the share of device memory the engine may use
    (``--gpu-memory-utilization 0.9``); ``cuda_graphs`` False is eager mode
    (``--enforce-eager``); ``chunked_prefill`` splits long prompts into
    ``max_batched_tokens`` slices (``--enable-chunked-prefill``, on by default); without it an
    iteration takes whole prompts; ``max_model_len`` the longest request (prompt + output)
    the engine accepts (``--max-model-len``; None = what the job needs); ``kv_cache_dtype``
    (``--kv-cache-dtype``: ``auto`` = BF16, or ``fp8``).
    """

    engine: Engine = attrs.field(default=Engine.VLLM, converter=to_engine, validator=one_of(Engine))
    tp: int = attrs.field(default=1, validator=positive_int)
    pp: int = attrs.field(default=1, validator=positive_int)
    quant: Quant = attrs.field(default=Quant.BF16, converter=to_quant, validator=one_of(Quant))
    max_batch_size: int = attrs.field(default=256, validator=positive_int)
    max_batched_tokens: int = attrs.field(default=8192, validator=positive_int)
    routing: Routing = attrs.field(
        default=Routing.LEAST_LOADED, converter=to_routing, validator=one_of(Routing)
    )
    gpu_memory_utilization: float = attrs.field(default=0.9, validator=_utilization)
    cuda_graphs: bool = attrs.field(default=True, validator=boolean)
    chunked_prefill: bool = attrs.field(default=True, validator=boolean)
    max_model_len: int | None = attrs.field(default=None, validator=optional(positive_int))
    kv_cache_dtype: str = attrs.field(default="auto", validator=_kv_dtype)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@attrs.frozen(cache_hash=True)
class Chain:
    """One model copy running in ``environment`` under ``config`` (paper's ``c = (e, x)``)."""

    model: str = attrs.field(validator=identifier)
    environment: Environment
    config: Config

    @property
    def gpus(self) -> int:
        return self.config.gpus

    @property
    def instances(self) -> float:
        """Instances occupied, as a share when several chains pack onto one instance."""
        return self.gpus / self.environment.gpus_per_instance

    @property
    def price_usd_per_h(self) -> float:
        return self.gpus * self.environment.price_usd_per_gpu_h


@attrs.frozen(cache_hash=True)
class Rank:
    """``replicas`` identical copies of one chain."""

    chain: Chain
    replicas: int = attrs.field(default=1, validator=[positive_int, int_in(1, MAX_COUNT)])

    @property
    def gpus(self) -> int:
        return self.replicas * self.chain.gpus

    @property
    def whole_instances(self) -> int:
        """Instances needed if this rank is packed alone."""
        return math.ceil(self.gpus / self.chain.environment.gpus_per_instance)

    @property
    def price_usd_per_h(self) -> float:
        return self.replicas * self.chain.price_usd_per_h


@attrs.frozen(cache_hash=True)
class Ladder:
    """The ranks assigned to one job; the empty ladder means "not running"."""

    ranks: tuple[Rank, ...] = attrs.field(default=(), converter=to_tuple)

    @property
    def is_empty(self) -> bool:
        return not self.ranks

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.ranks)

    @property
    def replicas(self) -> int:
        return sum(r.replicas for r in self.ranks)

    @property
    def price_usd_per_h(self) -> float:
        return sum(r.price_usd_per_h for r in self.ranks)

    def summary(self) -> str:
        """One line for people: ``2x pool vllm tp2 pp1 fp8 batch64 + …``, ``-`` when empty;
        a rank of several replicas routed other than least-loaded names its routing."""
        if self.is_empty:
            return "-"
        parts = []
        for r in self.ranks:
            c = r.chain.config
            routed = (
                f" {c.routing.value}"
                if r.replicas > 1 and c.routing is not Routing.LEAST_LOADED
                else ""
            )
            parts.append(
                f"{r.replicas}x {r.chain.environment.id} {c.engine} tp{c.tp} pp{c.pp} "
                f"{c.quant.value} batch{c.max_batch_size}{routed}"
            )
        return " + ".join(parts)

    def gpus_by_pool(self) -> dict[str, int]:
        """GPUs this ladder occupies in each pool (by environment id)."""
        use: Counter[str] = Counter()
        for r in self.ranks:
            use[r.chain.environment.id] += r.gpus
        return dict(use)

    def replicas_by_chain(self) -> dict[Chain, int]:
        """Replicas per chain (a chain listed twice counts once, summed)."""
        out: Counter[Chain] = Counter()
        for r in self.ranks:
            out[r.chain] += r.replicas
        return dict(out)

    def scales_in(self, current: Ladder) -> bool:
        """This ladder is ``current`` with replicas removed and nothing added: a host applies
        it by stopping replicas, so the GPUs are free at once (no make-before-break)."""
        mine, now = self.replicas_by_chain(), current.replicas_by_chain()
        return mine != now and all(n <= now.get(c, 0) for c, n in mine.items())

    def switch_peak_by_pool(self, current: Ladder) -> dict[str, int]:
        """GPUs per pool while switching from ``current`` to this ladder make-before-break:
        a chain in both holds its new replica count (added replicas come up beside the running
        ones, removed ones stop at once), a chain that leaves keeps its replicas until the new
        ones are up, a new chain takes its own."""
        mine, now = self.replicas_by_chain(), current.replicas_by_chain()
        use: Counter[str] = Counter()
        for chain in mine.keys() | now.keys():
            n = mine.get(chain, now.get(chain, 0))
            use[chain.environment.id] += n * chain.gpus
        return dict(use)
