"""Every default of the LLM proposer, in one frozen value."""

from __future__ import annotations

from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types.validators import non_negative, positive

__all__ = ["LlmConfig"]


def _count(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{attribute.name}: must be an integer >= 1, got {value!r}")


@attrs.frozen
class LlmConfig:
    """Defaults and limits of :class:`koi.plugins.LlmProposer`.

    ``api_key_env``, ``timeout_s`` and ``max_candidates`` are the proposer's defaults; the rest
    bound the request (``temperature``, ``max_tokens``) and what a reply may contain (the
    strict schema's limits and the byte cap on the HTTP body).  ``max_text_chars`` also caps how
    much of the budget book, DAG view and each mechanism goes into the prompt.

    .. versionadded:: 0.1
    """

    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = attrs.field(default=20.0, validator=positive)
    max_candidates: int = attrs.field(default=4, validator=_count)
    temperature: float = attrs.field(default=0.0, validator=non_negative)
    max_tokens: int = attrs.field(default=2048, validator=_count)
    max_reply_bytes: int = attrs.field(default=1_000_000, validator=_count)
    max_text_chars: int = attrs.field(default=4000, validator=_count)
    max_reply_ladders: int = attrs.field(default=32, validator=_count)
    max_ranks: int = attrs.field(default=16, validator=_count)
    max_replicas: int = attrs.field(default=4096, validator=_count)
    max_parallel: int = attrs.field(default=64, validator=_count)
