"""JSON round-trips for every value type, with errors that name the offending path."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, is_sequence, list_structure_factory
from cattrs.errors import ClassValidationError, IterableValidationError
from cattrs.gen import make_dict_structure_fn

from koi.errors import InvalidInput, KoiError
from koi.types._enums import Quant

__all__ = ["from_data", "from_json", "parse_json", "to_data", "to_json"]

T = TypeVar("T")

_converter = cattrs.Converter(forbid_extra_keys=True)


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


def _json_kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else f"{value!r}"


Hook = Callable[[Any, Any], Any]


# Containers are checked for their JSON kind before they are walked: a list where an object is
# expected would fail deep inside cattrs ("'list' object has no attribute 'keys'"), and a
# string or an object where a list is expected would be read key by key or letter by letter.
def _object_hook(cls: type) -> Hook:
    structure: Hook = make_dict_structure_fn(cls, _converter)

    def hook(value: Any, t: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _NotCoerced(f"must be an object, got {_json_kind(value)}")
        return structure(value, t)

    return hook


def _list_hook(t: Any) -> Hook:
    origin = getattr(t, "__origin__", t)
    make = list_structure_factory if origin is list else homogenous_tuple_structure_factory
    structure: Hook = make(t, _converter)

    def hook(value: Any, t: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise _NotCoerced(f"must be a list, got {_json_kind(value)}")
        return structure(value, t)

    return hook


def _homogeneous(t: Any) -> bool:
    args = getattr(t, "__args__", ())
    return is_sequence(t) and (getattr(t, "__origin__", None) is list or args[-1:] == (...,))


_converter.register_structure_hook_factory(attrs.has, _object_hook)
_converter.register_structure_hook_factory(_homogeneous, _list_hook)
# A job's precision set is checked by Job's own converter and validator, which name the whole
# field.  (Registered last: the latest registration wins.)
_converter.register_structure_hook_func(lambda t: t == tuple[Quant, ...], lambda value, _t: value)


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
    except _NotCoerced as exc:
        prefix = f"{where}: " if where else ""
        raise InvalidInput(f"{prefix}{cls.__name__} {exc}") from None
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
