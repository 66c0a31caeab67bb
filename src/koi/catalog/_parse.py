"""Parsing catalog TOML (the built-in data files and user files) into koi value types."""

from __future__ import annotations

import os
import tomllib
import types
import typing
from typing import Any, TypeVar

import attrs

from koi.catalog._instance import InstanceType
from koi.errors import InvalidInput, read_text
from koi.types import GpuSpec, ModelSpec, from_data

__all__ = ["CatalogEntries", "parse_catalog_text", "read_catalog_file"]

T = TypeVar("T")

# Top-level array-of-tables name -> entry type.  Each file may hold any subset.
_SECTIONS: dict[str, type[Any]] = {
    "gpus": GpuSpec,
    "models": ModelSpec,
    "instances": InstanceType,
}
# Keys allowed in every entry besides the type's fields: provenance, kept out of the value.
_META_KEYS = ("source",)


@attrs.frozen
class CatalogEntries:
    """The entries of one catalog file, in file order."""

    gpus: tuple[GpuSpec, ...] = ()
    models: tuple[ModelSpec, ...] = ()
    instances: tuple[InstanceType, ...] = ()


def _nullable_fields(cls: type[Any]) -> tuple[str, ...]:
    """Fields that accept ``None`` but have no default: TOML has no null, so omission means None."""
    hints = typing.get_type_hints(cls)
    return tuple(
        f.name
        for f in attrs.fields(cls)
        if f.default is attrs.NOTHING
        and isinstance(hints[f.name], types.UnionType)
        and type(None) in typing.get_args(hints[f.name])
    )


def _entry_key(section: str, value: Any) -> str:
    return str(value.id if section == "instances" else value.name)


def _parse_section(section: str, tables: object, *, where: str) -> tuple[Any, ...]:
    if not isinstance(tables, list):
        msg = f"{where}: {section}: must be an array of tables ([[{section}]]), got {tables!r}"
        raise InvalidInput(msg)
    cls = _SECTIONS[section]
    out: list[Any] = []
    first_index: dict[str, int] = {}
    for i, raw in enumerate(tables):
        if not isinstance(raw, dict):
            raise InvalidInput(f"{where}: {section}[{i}]: must be a table, got {raw!r}")
        label = f"{section}[{i}]"
        name = raw.get("name")
        if isinstance(name, str):
            label += (
                f" ({raw['cloud']}/{name})" if isinstance(raw.get("cloud"), str) else f" ({name})"
            )
        data = {k: v for k, v in raw.items() if k not in _META_KEYS}
        for field in _nullable_fields(cls):
            data.setdefault(field, None)
        for key in _META_KEYS:
            if key in raw and not isinstance(raw[key], str):
                raise InvalidInput(f"{where}: {label}: {key}: must be a string, got {raw[key]!r}")
        value = from_data(data, cls, where=f"{where}: {label}")
        key = _entry_key(section, value)
        if key in first_index:
            msg = f"{where}: {label}: duplicate of {section}[{first_index[key]}] ({key})"
            raise InvalidInput(msg)
        first_index[key] = i
        out.append(value)
    return tuple(out)


def parse_catalog_text(text: str, *, where: str) -> CatalogEntries:
    """Parse catalog TOML ``text``; errors name ``where`` (a file name) and the entry.

    Raises
    ------
    InvalidInput
        On invalid TOML, an unknown top-level table, a malformed or duplicate entry.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{where}: not valid TOML ({exc})") from None
    except RecursionError:
        raise InvalidInput(f"{where}: TOML nested too deeply") from None
    unknown = sorted(set(doc) - set(_SECTIONS))
    if unknown:
        msg = f"{where}: unknown table(s) {unknown}; expected any of {sorted(_SECTIONS)}"
        raise InvalidInput(msg)
    parsed = {s: _parse_section(s, doc[s], where=where) for s in _SECTIONS if s in doc}
    return CatalogEntries(**parsed)


def read_catalog_file(path: str | os.PathLike[str]) -> CatalogEntries:
    """Read and parse a user catalog file (same format as the built-in data files)."""
    where = os.fspath(path)
    text = read_text(path, what="catalog file")
    return parse_catalog_text(text, where=where)
