"""Scopes: conjunctions of predicates over a deployed rank's context (DESIGN §4.3)."""

from __future__ import annotations

import enum
import math
import operator
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types import GpuSpec, Job, JobClass, LinkKind, Market, ModelSpec, Quant, Rank, Routing

__all__ = ["Predicate", "RankContext", "Scope"]

Scalar = int | float | bool | str


@attrs.frozen
class RankContext:
    """What a scope can talk about: model, hardware, workload and config of one rank."""

    model: str
    size_class: str
    is_moe: bool
    params_b: float
    gpu: str
    interconnect: LinkKind
    gpu_memory_gib: float
    engine: str
    tp: int
    pp: int
    quant: Quant
    max_batch_size: int
    max_batched_tokens: int
    replicas: int
    routing: Routing
    market: Market
    job_class: JobClass
    input_len: float
    output_len: float

    @classmethod
    def from_rank(cls, rank: Rank, model: ModelSpec, gpu: GpuSpec, job: Job) -> RankContext:
        """The context of ``rank`` serving ``job`` with ``model`` on ``gpu``."""
        chain, cfg = rank.chain, rank.chain.config
        if model.name != chain.model:
            raise InvalidInput(f"model: rank runs {chain.model!r}, got spec for {model.name!r}")
        if gpu.name != chain.environment.gpu:
            msg = f"gpu: rank runs on {chain.environment.gpu!r}, got spec for {gpu.name!r}"
            raise InvalidInput(msg)
        return cls(
            model=model.name,
            size_class=model.size_class,
            is_moe=model.is_moe,
            params_b=model.params_b,
            gpu=gpu.name,
            interconnect=gpu.link,
            gpu_memory_gib=gpu.memory_gib,
            engine=cfg.engine,
            tp=cfg.tp,
            pp=cfg.pp,
            quant=cfg.quant,
            max_batch_size=cfg.max_batch_size,
            max_batched_tokens=cfg.max_batched_tokens,
            replicas=rank.replicas,
            routing=cfg.routing,
            market=chain.environment.market,
            job_class=job.job_class,
            input_len=job.workload.input_len.mean,
            output_len=job.workload.output_len.mean,
        )


class _Kind(enum.Enum):
    INT = "int"  # positive integers
    REAL = "real"  # positive reals
    BOOL = "bool"
    ENUM = "enum"
    STR = "str"  # open vocabulary (names)


_FIELDS: dict[str, tuple[_Kind, type[enum.Enum] | None]] = {
    "model": (_Kind.STR, None),
    "size_class": (_Kind.STR, None),
    "is_moe": (_Kind.BOOL, None),
    "params_b": (_Kind.REAL, None),
    "gpu": (_Kind.STR, None),
    "interconnect": (_Kind.ENUM, LinkKind),
    "gpu_memory_gib": (_Kind.REAL, None),
    "engine": (_Kind.STR, None),
    "tp": (_Kind.INT, None),
    "pp": (_Kind.INT, None),
    "quant": (_Kind.ENUM, Quant),
    "max_batch_size": (_Kind.INT, None),
    "max_batched_tokens": (_Kind.INT, None),
    "replicas": (_Kind.INT, None),
    "routing": (_Kind.ENUM, Routing),
    "market": (_Kind.ENUM, Market),
    "job_class": (_Kind.ENUM, JobClass),
    "input_len": (_Kind.REAL, None),
    "output_len": (_Kind.REAL, None),
}
_ORDER_OPS = ("<", "<=", ">", ">=")
_OPS = ("==", "!=", "in", *_ORDER_OPS)
# What each operator tests, ``(actual, value)``: a scope is matched against every candidate's
# ranks each tick, so the test is looked up, not chosen by comparing strings.
_TESTS: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "in": lambda actual, values: actual in values,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _coerce(field: str, raw: object) -> Scalar:
    kind, vocab = _FIELDS[field]
    text = raw.strip().strip("'\"") if isinstance(raw, str) else raw
    try:
        if kind is _Kind.INT:
            value = float(text) if isinstance(text, str) else text
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError
            if not float(value).is_integer():
                raise ValueError
            return int(value)
        if kind is _Kind.REAL:
            value = float(text) if isinstance(text, str) else text
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError
            if not math.isfinite(value):
                raise ValueError
            return float(value)
        if kind is _Kind.BOOL:
            if isinstance(text, bool):
                return text
            if isinstance(text, str) and text.lower() in ("true", "false"):
                return text.lower() == "true"
            raise ValueError
        if kind is _Kind.ENUM:
            assert vocab is not None
            member: Any = vocab(text)
            return str(member.value)
        if not isinstance(text, str) or not text:
            raise ValueError
        return text
    except (TypeError, ValueError):
        raise InvalidInput(f"scope: {field}: {raw!r} is not a valid {kind.value}") from None


def _norm_value(field: str, op: str, value: object) -> Scalar | tuple[Scalar, ...]:
    if op == "in":
        items = value.strip().strip("()[]{}").split(",") if isinstance(value, str) else value
        if not isinstance(items, Iterable):
            raise InvalidInput(f"scope: {field} in ...: expected a collection, got {value!r}")
        values = tuple(sorted({_coerce(field, v) for v in items if v != ""}, key=str))
        if not values:
            raise InvalidInput(f"scope: {field} in ...: the collection is empty")
        return values
    return _coerce(field, value)


def _check_field_op(field: str, op: str) -> None:
    if field not in _FIELDS:
        known = ", ".join(sorted(_FIELDS))
        raise InvalidInput(f"scope: unknown field {field!r}; known: {known}")
    if op not in _OPS:
        raise InvalidInput(f"scope: {field}: unknown operator {op!r}; use one of {_OPS}")
    if op in _ORDER_OPS and _FIELDS[field][0] not in (_Kind.INT, _Kind.REAL):
        raise InvalidInput(f"scope: {field}: operator {op!r} needs a numeric field")


@attrs.frozen
class Predicate:
    """``field op value`` over a :class:`RankContext`; build with :meth:`make`.

    Enum fields (``interconnect``, ``quant``, ``routing``, ``market``, ``job_class``) and
    names compare by their string value; only numeric fields admit ``<``, ``<=``, ``>``, ``>=``.
    """

    field: str
    op: str
    value: Any

    def __attrs_post_init__(self) -> None:
        _check_field_op(self.field, self.op)
        if _norm_value(self.field, self.op, self.value) != self.value:
            msg = f"scope: {self.field} {self.op} {self.value!r} is not normalised; use make()"
            raise InvalidInput(msg)

    @classmethod
    def make(cls, field: str, op: str, value: object) -> Predicate:
        """Validate and normalise (enum members to their values, ``in`` to a sorted tuple)."""
        _check_field_op(field, op)
        return cls(field, op, _norm_value(field, op, value))

    def matches(self, ctx: RankContext) -> bool:
        actual: Any = getattr(ctx, self.field)
        if isinstance(actual, enum.Enum):
            actual = actual.value
        return bool(_TESTS[self.op](actual, self.value))

    def to_text(self) -> str:
        if self.op == "in":
            return f"{self.field} in ({', '.join(_fmt(v) for v in self.value)})"
        return f"{self.field} {self.op} {_fmt(self.value)}"


def _fmt(value: Scalar) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_CLAUSE = re.compile(r"^\s*([a-z_]+)\s*(==|!=|<=|>=|<|>|\bin\b)\s*(.+?)\s*$")


def _to_predicates(value: Iterable[Predicate]) -> tuple[Predicate, ...]:
    out = tuple(sorted(set(value), key=lambda p: (p.field, p.op, str(p.value))))
    for p in out:
        if not isinstance(p, Predicate):
            raise InvalidInput(f"scope: expected Predicate values, got {p!r}")
    return out


@attrs.frozen
class Scope:
    """A conjunction of predicates; the empty scope applies everywhere."""

    predicates: tuple[Predicate, ...] = attrs.field(default=(), converter=_to_predicates)

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``"interconnect == pcie and tp >= 4 and quant in (fp8, int4)"``.

        An empty text, ``"*"`` or ``"always"`` is the unconstrained scope.
        """
        if not isinstance(text, str):
            raise InvalidInput(f"scope: expected text, got {text!r}")
        if text.strip().lower() in ("", "*", "always"):
            return cls()
        preds = []
        for clause in re.split(r"\s+and\s+", text.strip(), flags=re.IGNORECASE):
            m = _CLAUSE.match(clause)
            if m is None:
                raise InvalidInput(f"scope: cannot read clause {clause!r} (want 'field op value')")
            preds.append(Predicate.make(m.group(1), m.group(2), m.group(3)))
        return cls(tuple(preds))

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(p.field for p in self.predicates)

    def to_text(self) -> str:
        return " and ".join(p.to_text() for p in self.predicates) or "always"

    def matches(self, ctx: RankContext) -> bool:
        """Whether a deployed rank's context satisfies every predicate."""
        return all(p.matches(ctx) for p in self.predicates)

    def canonical(self) -> tuple[tuple[Any, ...], ...] | None:
        """A normal form: equal for equivalent scopes, ``None`` when unsatisfiable."""
        entries = []
        for field in sorted(self.fields):
            entry = _canonical_field(field, [p for p in self.predicates if p.field == field])
            if entry is None:
                return None
            if entry:
                entries.append((field, *entry))
        return tuple(entries)

    @property
    def satisfiable(self) -> bool:
        return self.canonical() is not None

    def equivalent(self, other: Scope) -> bool:
        return self.canonical() == other.canonical()


_SMALL_RANGE = 4096  # finite integer ranges up to this size are written as explicit sets


def _canonical_field(field: str, preds: list[Predicate]) -> tuple[Any, ...] | None:
    """``()`` unconstrained, a tuple describing the allowed values, or ``None`` if empty."""
    kind, vocab = _FIELDS[field]
    allowed: set[Any] | None = None
    excluded: set[Any] = set()
    if kind is _Kind.BOOL:
        allowed = {False, True}
    elif kind is _Kind.ENUM:
        assert vocab is not None
        allowed = {str(m.value) for m in vocab}
    universe = None if allowed is None else frozenset(allowed)
    lo, lo_open, hi, hi_open = 0.0, kind is _Kind.REAL, math.inf, True
    if kind is _Kind.INT:
        lo, lo_open = 1.0, False  # every integer field is a count >= 1
    for p in preds:
        v = p.value
        if p.op == "==":
            allowed = {v} if allowed is None else allowed & {v}
        elif p.op == "in":
            allowed = set(v) if allowed is None else allowed & set(v)
        elif p.op == "!=":
            excluded.add(v)
        elif p.op in ("<", "<="):
            strict = p.op == "<"
            if v < hi or (v == hi and strict):
                hi, hi_open = float(v), strict
        elif v > lo or (v == lo and p.op == ">"):
            lo, lo_open = float(v), p.op == ">"

    def in_bounds(x: Any) -> bool:
        if kind not in (_Kind.INT, _Kind.REAL):
            return True
        return bool((x > lo or (x == lo and not lo_open)) and (x < hi or (x == hi and not hi_open)))

    if kind is _Kind.INT:
        # Integer bounds become closed: tp < 4 is tp <= 3.
        first = math.floor(lo) + 1 if lo_open or not float(lo).is_integer() else int(lo)
        last = (
            math.inf
            if hi == math.inf
            else (math.ceil(hi) - 1 if hi_open or not float(hi).is_integer() else int(hi))
        )
        if allowed is None and last != math.inf and last - first <= _SMALL_RANGE:
            allowed = set(range(int(first), int(last) + 1))
        lo, lo_open, hi, hi_open = float(first), False, float(last), False

    if allowed is not None:
        values = {x for x in allowed if in_bounds(x) and x not in excluded}
        if not values:
            return None
        if universe is not None and values == universe:
            return ()
        return ("in", tuple(sorted(values, key=str)))
    if kind is _Kind.STR:
        return ("not", tuple(sorted(excluded))) if excluded else ()
    # Numeric interval with optional holes.
    if lo > hi or (lo == hi and (lo_open or hi_open or lo in excluded)):
        return None
    holes = tuple(sorted(x for x in excluded if in_bounds(x)))
    default_lo = (1.0, False) if kind is _Kind.INT else (0.0, True)
    if (lo, lo_open) == default_lo and hi == math.inf and not holes:
        return ()
    return ("range", lo, lo_open, hi, hi_open, holes)
