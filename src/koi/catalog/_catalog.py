"""The catalog value: GPUs, models and instance types, with lookups and environment listing."""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping
from typing import TypeVar

import attrs

from koi.catalog._instance import InstanceType, _market
from koi.catalog._parse import read_catalog_file
from koi.errors import InvalidInput
from koi.types import Environment, GpuSpec, Market, ModelSpec

__all__ = ["Catalog"]

T = TypeVar("T")


def _gpu_map(value: Mapping[str, GpuSpec]) -> Mapping[str, GpuSpec]:
    return types.MappingProxyType(dict(value))


def _model_map(value: Mapping[str, ModelSpec]) -> Mapping[str, ModelSpec]:
    return types.MappingProxyType(dict(value))


def _instances(value: Iterable[InstanceType]) -> tuple[InstanceType, ...]:
    return tuple(value)


def _known(kind: str, name: str, known: Iterable[str]) -> InvalidInput:
    return InvalidInput(f"{kind}: unknown {kind} {name!r} (known: {', '.join(sorted(known))})")


def _check_names(kind: str, wanted: Iterable[str] | None, known: Iterable[str]) -> set[str] | None:
    """Filter values must exist: a typo would otherwise silently select nothing."""
    if wanted is None:
        return None
    if isinstance(wanted, str):
        wanted = (wanted,)
    names = set(wanted)
    known_set = set(known)
    for name in sorted(names - known_set):
        raise _known(kind, name, known_set)
    return names


@attrs.frozen
class Catalog:
    """GPUs by name, model architectures by name, and the instance types that sell the GPUs.

    Build one with :func:`koi.catalog.load_catalog`; extend it with :meth:`with_file` or
    :meth:`with_entries`.  Construction checks that mapping keys equal entry names, that
    instance ids (``cloud/name``) are unique and that every instance's GPU is in ``gpus``.
    """

    gpus: Mapping[str, GpuSpec] = attrs.field(converter=_gpu_map, hash=False)
    models: Mapping[str, ModelSpec] = attrs.field(converter=_model_map, hash=False)
    instances: tuple[InstanceType, ...] = attrs.field(converter=_instances)

    def __attrs_post_init__(self) -> None:
        for kind, table in (("gpus", self.gpus), ("models", self.models)):
            for key, spec in table.items():
                if key != spec.name:
                    raise InvalidInput(f"{kind}[{key!r}]: key differs from name {spec.name!r}")
        seen: set[str] = set()
        for i, inst in enumerate(self.instances):
            if inst.id in seen:
                raise InvalidInput(f"instances[{i}]: duplicate instance type {inst.id!r}")
            seen.add(inst.id)
            _check_instance(inst, self.gpus, where=f"instances[{i}]")

    # -- lookups -------------------------------------------------------------------------------

    def gpu(self, name: str) -> GpuSpec:
        """The GPU called ``name``; :class:`InvalidInput` listing the known names otherwise."""
        return _lookup(self.gpus, "gpu", name)

    def model(self, name: str) -> ModelSpec:
        """The model called ``name``; :class:`InvalidInput` listing the known names otherwise."""
        return _lookup(self.models, "model", name)

    def instance(self, cloud: str, name: str) -> InstanceType:
        """The instance type ``name`` of ``cloud``."""
        for inst in self.instances:
            if inst.cloud == cloud and inst.name == name:
                return inst
        raise _known("instance", f"{cloud}/{name}", (i.id for i in self.instances))

    @property
    def clouds(self) -> tuple[str, ...]:
        """Cloud names (including ``onprem``) in sorted order."""
        return tuple(sorted({i.cloud for i in self.instances}))

    # -- environments --------------------------------------------------------------------------

    def environments(
        self,
        *,
        clouds: Iterable[str] | None = None,
        gpus: Iterable[str] | None = None,
        markets: Iterable[Market | str] | None = None,
        regions: Iterable[str] | None = None,
    ) -> tuple[Environment, ...]:
        """Every (instance type, region, market) environment that passes the filters.

        ``None`` means no filter.  Unknown cloud, GPU, market or region names raise
        :class:`InvalidInput` (a typo would otherwise select nothing).  The result is sorted by
        :attr:`Environment.id`, so it is deterministic whatever the file order.
        """
        want_clouds = _check_names("cloud", clouds, self.clouds)
        want_gpus = _check_names("gpu", gpus, self.gpus)
        want_regions = _check_names(
            "region", regions, {r for i in self.instances for r in i.regions}
        )
        want_markets = _market_set(markets)
        out: list[Environment] = []
        for inst in self.instances:
            if want_clouds is not None and inst.cloud not in want_clouds:
                continue
            if want_gpus is not None and inst.gpu not in want_gpus:
                continue
            for env in inst.environments(want_markets):
                if want_regions is None or env.region in want_regions:
                    out.append(env)
        return tuple(sorted(out, key=lambda e: e.id))

    def cheapest_usd_per_gpu_h(
        self, gpu: str, *, markets: Iterable[Market | str] | None = None
    ) -> float:
        """Lowest price of one GPU-hour of ``gpu`` over every instance type selling it.

        .. math:: \\min_{k:\\, gpu(k)=g,\\; m \\in M(k)} \\; p_{k,m} / n_k

        where ``p`` is the instance-hour price in market ``m`` and ``n`` the GPUs per instance.
        Raises :class:`InvalidInput` when no instance sells ``gpu`` in the given markets.
        """
        self.gpu(gpu)
        wanted = _market_set(markets)
        prices = [
            inst.price_usd_per_h(m) / inst.gpus_per_instance
            for inst in self.instances
            if inst.gpu == gpu
            for m in inst.markets
            if wanted is None or m in wanted
        ]
        if not prices:
            raise InvalidInput(f"gpu: no instance type sells {gpu!r} in the requested markets")
        return min(prices)

    # -- extension -----------------------------------------------------------------------------

    def with_entries(
        self,
        *,
        gpus: Iterable[GpuSpec] = (),
        models: Iterable[ModelSpec] = (),
        instances: Iterable[InstanceType] = (),
    ) -> Catalog:
        """A new catalog where the given entries are added or replace same-named ones.

        GPUs and models are matched by ``name``; instance types by ``cloud/name`` (a replaced
        instance type keeps its position, new ones are appended).
        """
        new_gpus = dict(self.gpus)
        new_gpus.update((g.name, g) for g in gpus)
        new_models = dict(self.models)
        new_models.update((m.name, m) for m in models)
        merged = {i.id: i for i in self.instances}
        for inst in instances:
            merged[inst.id] = inst
        return Catalog(gpus=new_gpus, models=new_models, instances=tuple(merged.values()))

    def with_file(self, path: str | os.PathLike[str]) -> Catalog:
        """A new catalog extended by a user TOML file in the built-in format.

        The file may hold any of ``[[gpus]]``, ``[[models]]`` and ``[[instances]]`` tables.
        Entries replace built-in ones of the same name.  A malformed entry raises
        :class:`InvalidInput` naming the file and the entry, e.g.
        ``my.toml: gpus[0] (X1): memory_gib: must be > 0, got -1``.
        """
        entries = read_catalog_file(path)
        # Check cross-references here so that the error names the file and the entry.
        gpus = {**self.gpus, **{g.name: g for g in entries.gpus}}
        for i, inst in enumerate(entries.instances):
            _check_instance(inst, gpus, where=f"{os.fspath(path)}: instances[{i}]")
        try:
            return self.with_entries(
                gpus=entries.gpus, models=entries.models, instances=entries.instances
            )
        except InvalidInput as exc:
            # e.g. a GPU override that shrinks gpus_per_node below a built-in instance's size
            raise InvalidInput(f"{os.fspath(path)}: {exc}") from None


def _market_set(markets: Iterable[Market | str] | None) -> set[Market] | None:
    if markets is None:
        return None
    if isinstance(markets, str):  # a single market, not an iterable of characters
        return {_market(markets)}
    return {_market(m) for m in markets}


def _lookup(table: Mapping[str, T], kind: str, name: str) -> T:
    try:
        return table[name]
    except KeyError:
        raise _known(kind, name, table) from None


def _check_instance(inst: InstanceType, gpus: Mapping[str, GpuSpec], *, where: str) -> None:
    spec = gpus.get(inst.gpu)
    if spec is None:
        msg = (
            f"{where} ({inst.id}): gpu: unknown GPU {inst.gpu!r} (known: {', '.join(sorted(gpus))})"
        )
        raise InvalidInput(msg)
    if inst.gpus_per_instance > spec.gpus_per_node:
        msg = (
            f"{where} ({inst.id}): gpus_per_instance: must be <= {spec.gpus_per_node} "
            f"(gpus_per_node of {spec.name}), got {inst.gpus_per_instance}"
        )
        raise InvalidInput(msg)
