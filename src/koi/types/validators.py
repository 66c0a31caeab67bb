"""attrs validators that raise :class:`koi.errors.InvalidInput` naming the field and the value."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types._enums import Engine

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _fail(attribute: attrs.Attribute[Any], rule: str, value: object) -> InvalidInput:
    return InvalidInput(f"{attribute.name}: must be {rule}, got {value!r}")


def _number(attribute: attrs.Attribute[Any], value: object) -> float:
    if type(value) is float and value == value:  # the common case, on the planner's hot path
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(attribute, "a number", value)
    if math.isnan(value):
        raise _fail(attribute, "a number, not NaN", value)
    return float(value)


def positive(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Finite and strictly positive."""
    v = _number(attribute, value)
    if not (0 < v < math.inf):
        raise _fail(attribute, "> 0", value)


def above_one(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Finite and strictly greater than one (a ratio that means "more than")."""
    v = _number(attribute, value)
    if not (1 < v < math.inf):
        raise _fail(attribute, "> 1", value)


def non_negative(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Finite and at least zero."""
    v = _number(attribute, value)
    if not (0 <= v < math.inf):
        raise _fail(attribute, ">= 0", value)


def non_negative_or_inf(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """At least zero; infinity allowed (an overloaded queue has unbounded latency)."""
    if _number(attribute, value) < 0:
        raise _fail(attribute, ">= 0", value)


def finite(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Any finite number."""
    if not math.isfinite(_number(attribute, value)):
        raise _fail(attribute, "finite", value)


def not_nan(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Any number but NaN (infinities allowed)."""
    _number(attribute, value)


def fraction(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A number in [0, 1]."""
    v = _number(attribute, value)
    if not 0 <= v <= 1:
        raise _fail(attribute, "in [0, 1]", value)


def boolean(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """``True`` or ``False`` itself: no ``1``, ``"no"`` (which would count as true) or NumPy
    boolean."""
    if not isinstance(value, bool):
        raise _fail(attribute, "true or false", value)


def share(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A number in (0, 1]: a share that must leave something."""
    v = _number(attribute, value)
    if not 0 < v <= 1:
        raise _fail(attribute, "in (0, 1]", value)


def positive_ints(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A non-empty tuple of integers >= 1 (an enumeration's options)."""
    if not isinstance(value, tuple) or not value:
        raise _fail(attribute, "a non-empty list of integers >= 1", value)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        raise _fail(attribute, "a non-empty list of integers >= 1", value)


def optional(validator: Validator) -> Validator:
    """Apply ``validator`` unless the value is ``None``."""

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None:
            validator(inst, attribute, value)

    return check


def number_in(low: float, high: float) -> Validator:
    """A number in ``[low, high]``: a bound far past any real value, so that a typo such as
    1e308 is refused where it enters rather than overflowing inside a tick."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not low <= _number(attribute, value) <= high:
            raise _fail(attribute, f"in [{low:g}, {high:g}]", value)

    return check


def positive_int(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(attribute, "an integer >= 1", value)


def non_negative_int(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An ``int`` >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(attribute, "an integer >= 0", value)


def int_in(low: int, high: int) -> Validator:
    """An ``int`` in ``[low, high]`` (counts a solver stores in 64-bit integers get a ceiling)."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _fail(attribute, f"an integer in [{low}, {high}]", value)

    return check


def identifier(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A non-empty string without surrounding whitespace."""
    if not isinstance(value, str) or not value or value != value.strip():
        raise _fail(attribute, "a non-empty name", value)


def names(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A tuple (possibly empty) of distinct lower-case names."""
    rule = "a list of distinct lower-case names"
    if not isinstance(value, tuple) or len(set(value)) != len(value):
        raise _fail(attribute, rule, value)
    for v in value:
        if not isinstance(v, str) or not v or v != v.strip().lower():
            raise _fail(attribute, rule, value)


def one_of(kind: type[Any]) -> Validator:
    """A member of the enum ``kind``."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            choices = ", ".join(str(m.value) for m in kind)
            raise _fail(attribute, f"one of {choices}", value)

    return check


def instance_of(kind: type[Any]) -> Validator:
    """An instance of ``kind`` itself (no duck typing; for ``bool`` see :func:`boolean`).  The
    message names the type expected and the type given."""

    def check(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            msg = f"{attribute.name}: expected {kind.__name__}, got {type(value).__name__}"
            raise InvalidInput(msg)

    return check


def engine_name(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """The name of an engine of the closed set :class:`koi.types.Engine`."""
    if value not in {e.value for e in Engine}:
        raise _fail(attribute, f"one of {', '.join(e.value for e in Engine)}", value)


def engine_names(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """A non-empty tuple of distinct engine names (an enumeration's options)."""
    known = {e.value for e in Engine}
    rule = f"a non-empty list of distinct engines among {', '.join(sorted(known))}"
    if not isinstance(value, tuple) or not value or len(set(value)) != len(value):
        raise _fail(attribute, rule, value)
    if not all(isinstance(v, str) and v in known for v in value):
        raise _fail(attribute, rule, value)


def list_to_tuple(value: Any) -> Any:
    """Converter: a list (TOML has no tuples) becomes a tuple; anything else, a string above
    all, is left for the validator to refuse rather than read letter by letter."""
    return tuple(value) if isinstance(value, list) else value


def to_tuple(value: Any) -> tuple[Any, ...]:
    """Converter: lists become tuples so that value types stay hashable."""
    return tuple(value)
