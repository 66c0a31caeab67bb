"""JSON round-trips for every value type, with errors that name the offending path."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import cattrs
from cattrs.errors import ClassValidationError, IterableValidationError

from koi.errors import InvalidInput, KoiError
from koi.types._enums import Quant

__all__ = ["from_data", "from_json", "parse_json", "to_data", "to_json"]

T = TypeVar("T")

_converter = cattrs.Converter(forbid_extra_keys=True)
# A job's precision set is checked by Job's own converter and validator, which name the whole
# field (a bare string would otherwise be read letter by letter).
_converter.register_structure_hook_func(lambda t: t == tuple[Quant, ...], lambda value, _t: value)


class _NotCoerced(TypeError):
    """A scalar of the wrong JSON type (its message is the whole explanation)."""


# Scalars are taken as given, never coerced: ``2.999``, ``"2"`` and ``true`` are not the integer
# 2, ``"0.5"`` is not a number and ``3`` is not a string.  (cattrs' defaults call ``int(x)``.)
def _strict_int(value: Any, _type: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _NotCoerced(f"must be an integer, got {value!r}")
    return value


def _strict_float(value: Any, _type: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _NotCoerced(f"must be a number, got {value!r}")
    return float(value)


def _strict_str(value: Any, _type: object) -> str:
    if not isinstance(value, str):
        raise _NotCoerced(f"must be a string, got {value!r}")
    return value


def _strict_bool(value: Any, _type: object) -> bool:
    if not isinstance(value, bool):
        raise _NotCoerced(f"must be true or false, got {value!r}")
    return value


_converter.register_structure_hook(int, _strict_int)
_converter.register_structure_hook(float, _strict_float)
_converter.register_structure_hook(str, _strict_str)
_converter.register_structure_hook(bool, _strict_bool)


def _describe(exc: BaseException, _type: object) -> str:
    if isinstance(exc, KoiError):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, _NotCoerced):
        return str(exc)
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


def parse_json(text: str, *, where: str = "") -> Any:
    """``json.loads(text)``; malformed JSON raises :class:`InvalidInput` naming ``where``."""
    prefix = f"{where}: " if where else ""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{prefix}not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        raise InvalidInput(msg) from None
    except RecursionError:
        raise InvalidInput(f"{prefix}JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past the interpreter's digit limit
        raise InvalidInput(f"{prefix}not valid JSON ({exc})") from None


def from_json(text: str, cls: type[T], *, where: str = "") -> T:
    """Parse JSON text into ``cls``; malformed JSON or values raise :class:`InvalidInput`."""
    prefix = f"{where}: " if where else ""
    data = parse_json(text, where=where)
    try:
        return from_data(data, cls, where=where)
    except RecursionError:
        raise InvalidInput(f"{prefix}JSON nested too deeply") from None
