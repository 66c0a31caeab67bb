"""Instance types: what a cloud (or an on-prem pool) sells, in which regions and markets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types import Environment, LinkKind, Market
from koi.types.validators import (
    boolean,
    identifier,
    list_to_tuple,
    non_negative,
    one_of,
    optional,
    positive,
    positive_int,
)

__all__ = ["InstanceType"]


def _regions(_inst: object, attribute: attrs.Attribute[Any], value: tuple[object, ...]) -> None:
    if not isinstance(value, tuple):
        raise InvalidInput(f"{attribute.name}: must be a list of region names, got {value!r}")
    if not value:
        raise InvalidInput(f"{attribute.name}: must list at least one region, got []")
    for region in value:
        if not isinstance(region, str) or not region or region != region.strip():
            raise InvalidInput(f"{attribute.name}: must be non-empty names, got {region!r}")
    if len(set(value)) != len(value):
        raise InvalidInput(f"{attribute.name}: must not repeat a region, got {list(value)}")


# Per-direction bandwidth of a x16 link, GB/s (PCI-SIG: 8/16/32/64 GT/s per lane).
PCIE_X16_GB_S = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


def _pcie_gen(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or value not in PCIE_X16_GB_S:
        raise InvalidInput(f"{attribute.name}: must be one of 3, 4, 5, 6, got {value!r}")


def _link(value: Any) -> Any:
    try:
        return LinkKind(value)
    except ValueError:
        return value  # the validator names the field and the choices


@attrs.frozen
class InstanceType:
    """One purchasable instance type, priced per instance-hour in each market it is sold in.

    A market whose price is ``None`` is not offered (the on-prem kind is sold only as
    ``reserved``, at its amortized cost; some clouds sell small GPU shapes only as spot).
    ``reserved_usd_per_h`` is the hourly equivalent of a one-year commitment.
    ``spot_preemption_per_h`` is the hazard λ of a spot reclaim: an instance survives an hour
    with probability ``exp(-λ)``. ``multi_node`` says that instances can be joined over a fast
    fabric (EFA / InfiniBand) to hold one multi-node chain.  ``link`` is the node's GPU
    interconnect when it differs from the GPU's catalog link (``pcie`` with peer-to-peer,
    ``pcie_no_p2p`` when collectives are staged through host memory); ``pcie_gen`` the PCIe
    generation of its GPU slots (3-6), which sets the link bandwidth.
    """

    cloud: str = attrs.field(validator=identifier)
    name: str = attrs.field(validator=identifier)
    gpu: str = attrs.field(validator=identifier)
    gpus_per_instance: int = attrs.field(validator=positive_int)
    regions: tuple[str, ...] = attrs.field(converter=list_to_tuple, validator=_regions)
    on_demand_usd_per_h: float | None = attrs.field(default=None, validator=optional(positive))
    spot_usd_per_h: float | None = attrs.field(default=None, validator=optional(positive))
    reserved_usd_per_h: float | None = attrs.field(default=None, validator=optional(positive))
    spot_preemption_per_h: float = attrs.field(default=0.0, validator=non_negative)
    multi_node: bool = attrs.field(default=False, validator=boolean)
    link: LinkKind | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_link),
        validator=optional(one_of(LinkKind)),
    )
    pcie_gen: int | None = attrs.field(default=None, validator=optional(_pcie_gen))

    @property
    def link_gb_s(self) -> float | None:
        """Per-GPU, per-direction bandwidth of a PCIe x16 link of ``pcie_gen`` (None if unset)."""
        return None if self.pcie_gen is None else PCIE_X16_GB_S[self.pcie_gen]

    def __attrs_post_init__(self) -> None:
        if not self.markets:
            msg = (
                "on_demand_usd_per_h: at least one of on_demand_usd_per_h, spot_usd_per_h, "
                "reserved_usd_per_h must be set"
            )
            raise InvalidInput(msg)
        if self.spot_usd_per_h is None and self.spot_preemption_per_h > 0:
            msg = (
                "spot_preemption_per_h: must be 0 when no spot price is set, "
                f"got {self.spot_preemption_per_h!r}"
            )
            raise InvalidInput(msg)

    @property
    def id(self) -> str:
        """Stable identifier: ``cloud/name``."""
        return f"{self.cloud}/{self.name}"

    @property
    def markets(self) -> tuple[Market, ...]:
        """Markets this instance type is sold in, in the order on-demand, spot, reserved."""
        return tuple(m for m in Market if self._price(m) is not None)

    def _price(self, market: Market) -> float | None:
        if market is Market.ON_DEMAND:
            return self.on_demand_usd_per_h
        if market is Market.SPOT:
            return self.spot_usd_per_h
        return self.reserved_usd_per_h

    def price_usd_per_h(self, market: Market | str) -> float:
        """Price of one instance-hour in ``market``; :class:`InvalidInput` if not sold there."""
        m = _market(market)
        price = self._price(m)
        if price is None:
            offered = ", ".join(x.value for x in self.markets)
            msg = f"market: {self.id} is not sold as {m.value} (offered: {offered})"
            raise InvalidInput(msg)
        return price

    def environment(self, region: str, market: Market | str) -> Environment:
        """The :class:`~koi.types.Environment` of this instance type in ``region`` and ``market``.

        Spot environments carry ``spot_preemption_per_h``; the others have no preemption.
        """
        if region not in self.regions:
            msg = (
                f"region: {self.id} is not sold in {region!r} (regions: {', '.join(self.regions)})"
            )
            raise InvalidInput(msg)
        m = _market(market)
        return Environment(
            cloud=self.cloud,
            region=region,
            market=m,
            instance_type=self.name,
            gpu=self.gpu,
            gpus_per_instance=self.gpus_per_instance,
            price_usd_per_h=self.price_usd_per_h(m),
            preemption_per_h=self.spot_preemption_per_h if m is Market.SPOT else 0.0,
            multi_node=self.multi_node,
            link=self.link,
            link_gb_s=self.link_gb_s,
        )

    def environments(
        self, markets: Iterable[Market | str] | None = None
    ) -> tuple[Environment, ...]:
        """Every (region, market) environment, restricted to ``markets`` when given."""
        wanted = self.markets if markets is None else {_market(m) for m in markets}
        return tuple(
            self.environment(region, m)
            for region in self.regions
            for m in self.markets
            if m in wanted
        )


def _market(value: Market | str) -> Market:
    try:
        return Market(value)
    except ValueError:
        choices = ", ".join(m.value for m in Market)
        raise InvalidInput(f"market: must be one of {choices}, got {value!r}") from None
