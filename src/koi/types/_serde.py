"""JSON round-trips for every value type, with errors that name the offending path."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs
from cattrs.errors import ClassValidationError, IterableValidationError

from koi.errors import InvalidInput, KoiError

__all__ = ["from_data", "from_json", "to_data", "to_json"]

T = TypeVar("T")

_converter = cattrs.Converter(forbid_extra_keys=True)


def _describe(exc: BaseException, _type: object) -> str:
    if isinstance(exc, KoiError):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown field(s) {sorted(exc.extra_fields)}"
    return f"invalid value ({exc})"


def _path_messages(exc: BaseException) -> list[str]:
    out = []
    for line in cattrs.transform_error(exc, format_exception=_describe):
        message, _, path = line.rpartition(" @ ")
        path = path.removeprefix("$").removeprefix(".")
        # Our validators start their messages with the field name; join it onto the path.
        head, sep, rest = message.partition(": ")
        if sep and head.isidentifier() and not message.startswith("required"):
            path = f"{path}.{head}" if path else head
            message = rest
        out.append(f"{path}: {message}" if path else message)
    return out


def to_data(value: object) -> Any:
    """Plain JSON-ready data (dicts, lists, strings, numbers) for an attrs value."""
    return _converter.unstructure(value)


def from_data(data: Any, cls: type[T], *, where: str = "") -> T:
    """Build ``cls`` from plain data; raise :class:`InvalidInput` naming every bad path."""
    try:
        return _converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError) as exc:
        prefix = f"{where}: " if where else ""
        raise InvalidInput(prefix + "; ".join(_path_messages(exc))) from None
    except KoiError as exc:
        prefix = f"{where}: " if where else ""
        raise InvalidInput(f"{prefix}{exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        prefix = f"{where}: " if where else ""
        raise InvalidInput(f"{prefix}expected {cls.__name__}: {exc}") from None


def to_json(value: object, *, indent: int | None = None) -> str:
    """Serialize an attrs value to JSON text."""
    return json.dumps(to_data(value), indent=indent, sort_keys=False)


def from_json(text: str, cls: type[T], *, where: str = "") -> T:
    """Parse JSON text into ``cls``; malformed JSON or values raise :class:`InvalidInput`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        prefix = f"{where}: " if where else ""
        msg = f"{prefix}not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        raise InvalidInput(msg) from None
    return from_data(data, cls, where=where)
