"""Accelerators, the environments that sell them, and pools of obtainable capacity."""

from __future__ import annotations

import attrs

from koi.types._enums import LinkKind, Market, to_link, to_market
from koi.types.validators import (
    identifier,
    int_in,
    non_negative,
    number_in,
    one_of,
    optional,
    positive,
    positive_int,
)

__all__ = ["MAX_COUNT", "Environment", "GpuSpec", "Pool"]

# Ceiling of the GPU and instance counts of a snapshot: far above any fleet, far below what
# overflows the selector's 64-bit arithmetic.
MAX_COUNT = 1 << 31
#: A GPU of 100 TiB (far past any made): beyond is a typo.
MAX_MEMORY_GIB = 1e5


@attrs.frozen
class GpuSpec:
    """One accelerator type. Bandwidths are per GPU and per direction; TFLOPS are dense.

    ``fp8_tflops`` / ``int4_tflops`` are ``None`` where the tensor cores lack that format (the
    weights can still be stored quantized and dequantized to BF16 for the math).
    """

    name: str = attrs.field(validator=identifier)
    vendor: str = attrs.field(validator=identifier)
    memory_gib: float = attrs.field(validator=[positive, number_in(0.0, MAX_MEMORY_GIB)])
    hbm_tb_s: float = attrs.field(validator=positive)
    bf16_tflops: float = attrs.field(validator=positive)
    fp8_tflops: float | None = attrs.field(validator=optional(positive))
    int4_tflops: float | None = attrs.field(validator=optional(positive))
    link: LinkKind = attrs.field(converter=to_link, validator=one_of(LinkKind))
    link_gb_s: float = attrs.field(validator=positive)
    gpus_per_node: int = attrs.field(validator=positive_int)
    internode_gb_s: float = attrs.field(validator=positive)
    # Memory as the device reports it to CUDA (below the marketing figure); None = memory_gib.
    usable_memory_gib: float | None = attrs.field(default=None, validator=optional(positive))

    @property
    def device_memory_gib(self) -> float:
        """The memory an engine sizes its budget from (``usable_memory_gib`` when known)."""
        return self.memory_gib if self.usable_memory_gib is None else self.usable_memory_gib


@attrs.frozen(cache_hash=True)  # a dict key on the planner's hot path
class Environment:
    """Where a chain runs (paper's ``e``): a cloud instance type in one region and market."""

    cloud: str = attrs.field(validator=identifier)
    region: str = attrs.field(validator=identifier)
    market: Market = attrs.field(converter=to_market, validator=one_of(Market))
    instance_type: str = attrs.field(validator=identifier)
    gpu: str = attrs.field(validator=identifier)
    gpus_per_instance: int = attrs.field(validator=positive_int)
    price_usd_per_h: float = attrs.field(validator=non_negative)
    preemption_per_h: float = attrs.field(default=0.0, validator=non_negative)
    multi_node: bool = False
    # The instance's intra-node interconnect when it differs from the GPU's catalog link (e.g.
    # PCIe without peer-to-peer, or another PCIe generation); None means the GPU's.
    link: LinkKind | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(to_link),
        validator=optional(one_of(LinkKind)),
    )
    link_gb_s: float | None = attrs.field(default=None, validator=optional(positive))

    @property
    def id(self) -> str:
        """Stable identifier: ``cloud/region/market/instance_type``."""
        return f"{self.cloud}/{self.region}/{self.market.value}/{self.instance_type}"

    @property
    def price_usd_per_gpu_h(self) -> float:
        return self.price_usd_per_h / self.gpus_per_instance


@attrs.frozen
class Pool:
    """An environment with the number of instances the planner may hold there.

    ``capacity_instances`` counts everything obtainable, including instances occupied by the
    current ladders of active jobs; the planner derives what is free.
    """

    environment: Environment
    capacity_instances: int = attrs.field(validator=int_in(0, MAX_COUNT // 1024))

    @property
    def id(self) -> str:
        return self.environment.id

    @property
    def capacity_gpus(self) -> int:
        return self.capacity_instances * self.environment.gpus_per_instance
