"""The built-in catalog, parsed once per process, and user files on top of it."""

from __future__ import annotations

import functools
import os
import tomllib
import types
from importlib import resources

from koi.catalog._catalog import Catalog
from koi.catalog._instance import InstanceType
from koi.catalog._parse import parse_catalog_text
from koi.types import GpuSpec, ModelSpec

__all__ = ["load_catalog", "model_sources"]

_BUILTIN_FILES = ("gpus.toml", "models.toml", "instances.toml")


@functools.cache
def _builtin_catalog() -> Catalog:
    # Parsed once per process; Catalog is immutable so sharing it is safe.
    data = resources.files("koi.catalog") / "data"
    gpus: list[GpuSpec] = []
    models: list[ModelSpec] = []
    instances: list[InstanceType] = []
    for name in _BUILTIN_FILES:
        entries = parse_catalog_text((data / name).read_text(encoding="utf-8"), where=name)
        gpus += entries.gpus
        models += entries.models
        instances += entries.instances
    return Catalog(
        gpus={g.name: g for g in gpus},
        models={m.name: m for m in models},
        instances=tuple(instances),
    )


def load_catalog(*extra_files: str | os.PathLike[str]) -> Catalog:
    """The built-in catalog, extended by ``extra_files`` in order (later files win).

    Each extra file uses the built-in TOML format (``[[gpus]]``, ``[[models]]``,
    ``[[instances]]``); see ``docs/catalog.md``.  A malformed entry raises
    :class:`~koi.errors.InvalidInput` naming the file and the entry.
    """
    catalog = _builtin_catalog()
    for path in extra_files:
        catalog = catalog.with_file(path)
    return catalog


@functools.cache
def model_sources() -> types.MappingProxyType[str, str]:
    """Built-in model name -> the Hugging Face repository its numbers were copied from.

    The first word of each ``[[models]]`` entry's ``source`` (``"meta-llama/Llama-3.1-8B"``).
    Launchers use it as the default checkpoint to serve; user catalogs add no sources.
    """
    text = (resources.files("koi.catalog") / "data" / "models.toml").read_text(encoding="utf-8")
    tables = tomllib.loads(text).get("models", [])
    return types.MappingProxyType(
        {t["name"]: t["source"].split()[0] for t in tables if isinstance(t.get("source"), str)}
    )
