"""The strict reply schema of the LLM proposer, and a hand-written validator for it.

The reply is one JSON object ``{"ladders": [...]}``; each ladder is ``{"ranks": [...],
"rationale": "..."}`` and each rank names its pool, GPU and model explicitly so that a reply
that confuses them can be caught.  No extra keys, no type coercion (``true`` is not ``1``,
``"2"`` is not ``2``).  A violation at the top level rejects the reply; a violation inside one
ladder rejects only that ladder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from koi.plugins._llm_config import LlmConfig
from koi.types import Engine, Quant, Routing

__all__ = ["SchemaViolation", "dumps", "parse_reply", "reply_schema", "validate_ladder"]


class SchemaViolation(Exception):
    """``path: message`` for the first place a reply breaks the schema."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)


Check = Callable[[Any, str], Any]

_FENCE = re.compile(r"\A```(?:json)?\s*\n(?P<body>.*)\n```\s*\Z", re.DOTALL)


def _integer(lo: int, hi: int) -> Check:
    def check(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise SchemaViolation(path, f"must be an integer in {lo}..{hi}, got {value!r}")
        return value

    return check


def _text(max_len: int) -> Check:
    def check(value: Any, path: str) -> str:
        if not isinstance(value, str) or len(value) > max_len:
            raise SchemaViolation(path, f"must be a string of at most {max_len} characters")
        return value

    return check


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value or value != value.strip() or len(value) > 200:
        raise SchemaViolation(path, f"must be a non-empty name, got {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Check:
    def check(value: Any, path: str) -> str:
        if value not in options or not isinstance(value, str):
            raise SchemaViolation(path, f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return check


def _object(required: Mapping[str, Check], optional: Mapping[str, Check]) -> Check:
    def check(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise SchemaViolation(path, f"must be an object, got {type(value).__name__}")
        extra = sorted(set(value) - set(required) - set(optional))
        if extra:
            raise SchemaViolation(path, f"unknown field(s) {extra}")
        out: dict[str, Any] = {}
        for key, sub in required.items():
            if key not in value:
                raise SchemaViolation(f"{path}.{key}".lstrip("."), "required field missing")
            out[key] = sub(value[key], f"{path}.{key}".lstrip("."))
        for key, sub in optional.items():
            if key in value:
                out[key] = sub(value[key], f"{path}.{key}".lstrip("."))
        return out

    return check


def _array(item: Check, lo: int, hi: int) -> Check:
    def check(value: Any, path: str) -> list[Any]:
        if not isinstance(value, list) or not lo <= len(value) <= hi:
            raise SchemaViolation(path, f"must be an array of {lo}..{hi} items")
        return [item(v, f"{path}[{k}]") for k, v in enumerate(value)]

    return check


_QUANTS = tuple(q.value for q in Quant)
_ROUTINGS = tuple(r.value for r in Routing)
_ENGINES = tuple(e.value for e in Engine)
_MAX_BATCH = 1 << 16
_MAX_TOKENS = 1 << 22


def _ladder_check(limits: LlmConfig) -> Check:
    config = _object(
        {
            "tp": _integer(1, limits.max_parallel),
            "pp": _integer(1, limits.max_parallel),
            "quant": _choice(_QUANTS),
            "max_batch_size": _integer(1, _MAX_BATCH),
            "max_batched_tokens": _integer(1, _MAX_TOKENS),
        },
        {"engine": _choice(_ENGINES), "routing": _choice(_ROUTINGS)},
    )
    rank = _object(
        {
            "pool": _name,
            "gpu": _name,
            "model": _name,
            "replicas": _integer(1, limits.max_replicas),
            "config": config,
        },
        {},
    )
    return _object(
        {"ranks": _array(rank, 1, limits.max_ranks)}, {"rationale": _text(limits.max_text_chars)}
    )


def validate_ladder(value: Any, path: str, limits: LlmConfig) -> dict[str, Any]:
    """Check one ladder object; raise :class:`SchemaViolation` naming the first bad path."""
    result: dict[str, Any] = _ladder_check(limits)(value, path)
    return result


def parse_reply(text: str, limits: LlmConfig) -> list[Any]:
    """The raw ladder objects of a reply; raise :class:`SchemaViolation` if the reply is unusable.

    A reply wrapped in one Markdown code fence is unwrapped; anything else must be bare JSON.
    Individual ladders are *not* checked here (see :func:`validate_ladder`), so one bad ladder
    does not sink the others.
    """
    fenced = _FENCE.match(text.strip())
    body = fenced.group("body") if fenced else text
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        msg = f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        raise SchemaViolation("", msg) from None
    if not isinstance(data, dict):
        raise SchemaViolation("", f"must be a JSON object, got {type(data).__name__}")
    extra = sorted(set(data) - {"ladders"})
    if extra:
        raise SchemaViolation("", f"unknown field(s) {extra}")
    ladders = data.get("ladders")
    if not isinstance(ladders, list):
        raise SchemaViolation("ladders", "required array missing")
    if len(ladders) > limits.max_reply_ladders:
        raise SchemaViolation(
            "ladders", f"at most {limits.max_reply_ladders} ladders, got {len(ladders)}"
        )
    return ladders


def reply_schema(limits: LlmConfig, *, quants: Sequence[Quant] | None = None) -> dict[str, Any]:
    """The same schema as JSON Schema, to show the model in the prompt.

    ``quants`` narrows the ``quant`` enum to the precisions the job accepts (every precision
    when ``None``); a ladder outside them is rejected after parsing, naming the policy.
    """

    def integer(lo: int, hi: int) -> dict[str, Any]:
        return {"type": "integer", "minimum": lo, "maximum": hi}

    name = {"type": "string", "minLength": 1}
    config = {
        "type": "object",
        "additionalProperties": False,
        "required": ["tp", "pp", "quant", "max_batch_size", "max_batched_tokens"],
        "properties": {
            "tp": integer(1, limits.max_parallel),
            "pp": integer(1, limits.max_parallel),
            "quant": {"enum": list(_QUANTS if quants is None else (q.value for q in quants))},
            "max_batch_size": integer(1, _MAX_BATCH),
            "max_batched_tokens": integer(1, _MAX_TOKENS),
            "engine": {"enum": list(_ENGINES)},
            "routing": {"enum": list(_ROUTINGS)},
        },
    }
    rank = {
        "type": "object",
        "additionalProperties": False,
        "required": ["pool", "gpu", "model", "replicas", "config"],
        "properties": {
            "pool": name,
            "gpu": name,
            "model": name,
            "replicas": integer(1, limits.max_replicas),
            "config": config,
        },
    }
    ladder = {
        "type": "object",
        "additionalProperties": False,
        "required": ["ranks"],
        "properties": {
            "ranks": {"type": "array", "minItems": 1, "maxItems": limits.max_ranks, "items": rank},
            "rationale": {"type": "string", "maxLength": limits.max_text_chars},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["ladders"],
        "properties": {
            "ladders": {"type": "array", "maxItems": limits.max_reply_ladders, "items": ladder}
        },
    }


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON (stable prompts make replies reproducible)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
