"""The OpenAI-compatible LLM proposer: a built-in plugin, opt-in, advisory only.

It speaks the ``/chat/completions`` protocol over the standard library's ``http.client`` (see
``docs/plugins.md`` for why not the ``openai`` client): one request per call, no retries, a hard
deadline.  Replies are parsed against a strict schema; whatever fails is rejected with a reason.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from koi.candidates import ProposalContext
from koi.errors import InvalidInput, KoiError, PluginError
from koi.plugins._context import Rejection
from koi.plugins._llm_config import LlmConfig
from koi.plugins._llm_http import TransportError, post_json
from koi.plugins._llm_prompt import build_messages
from koi.plugins._llm_schema import SchemaViolation, parse_reply, validate_ladder
from koi.plugins._markers import hookimpl
from koi.plugins._redact import redact
from koi.types import Chain, Config, Job, Ladder, Pool, Rank

__all__ = ["LlmProposer"]

_DEFAULTS = LlmConfig()


def _base_url(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    parts = urllib.parse.urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{attribute.name}: must be an http(s) URL, got {value!r}")


def _name(_inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value or value != value.strip():
        raise InvalidInput(f"{attribute.name}: must be a non-empty name, got {value!r}")


def _content(envelope: Any) -> str:
    """The assistant message text of a chat-completions response."""
    try:
        content = envelope["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str):
        raise SchemaViolation("", "response has no choices[0].message.content string")
    return content


@attrs.frozen
class LlmProposer:
    """Ask an OpenAI-compatible chat endpoint for candidate ladders.

    Parameters
    ----------
    base_url
        The API root, e.g. ``http://127.0.0.1:8000/v1``; requests go to
        ``{base_url}/chat/completions``.
    model
        The chat model name the endpoint serves.
    api_key_env
        Environment variable holding the API key, read at call time; when unset no
        ``Authorization`` header is sent (local servers rarely need one).
    timeout_s
        Longest wait per call; the effective deadline is the earlier of this and
        ``context.deadline_s``.
    max_candidates
        Most ladders taken from one reply (also capped by ``context.max_candidates``).
    name
        Plugin name (``koi_plugin_name``); set it when registering several LLM proposers.
    config
        Remaining limits (temperature, token and byte caps, schema bounds).

    .. versionadded:: 0.1
    """

    base_url: str = attrs.field(validator=_base_url)
    model: str = attrs.field(validator=_name)
    api_key_env: str = attrs.field(default=_DEFAULTS.api_key_env, validator=_name)
    timeout_s: float = attrs.field(default=_DEFAULTS.timeout_s)
    max_candidates: int = attrs.field(default=_DEFAULTS.max_candidates)
    name: str = attrs.field(default="llm", validator=_name)
    config: LlmConfig = attrs.field(factory=LlmConfig)
    _clock: Callable[[], float] = attrs.field(default=time.monotonic, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        # Reuse LlmConfig's validators for the three overridable knobs.
        attrs.evolve(self.config, timeout_s=self.timeout_s, max_candidates=self.max_candidates)

    @classmethod
    def from_config(
        cls, base_url: str, model: str, config: LlmConfig, *, name: str = "llm"
    ) -> LlmProposer:
        """A proposer whose key variable, timeout and candidate cap come from ``config``."""
        return cls(
            base_url,
            model,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_candidates=config.max_candidates,
            name=name,
            config=config,
        )

    @property
    def koi_plugin_name(self) -> str:
        return self.name

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> list[Ladder | Rejection]:
        """Ask the endpoint once; return its valid ladders and a rejection for each bad one.

        Raises :class:`~koi.errors.PluginError` when the whole reply is unusable (timeout,
        transport or HTTP error, not JSON, top-level schema violation); the facade then reports
        it and goes on without this proposer.
        """
        deadline = min(context.deadline_s, self._clock() + self.timeout_s)
        limit = min(self.max_candidates, context.max_candidates)
        messages = build_messages(job, context, max_candidates=limit, config=self.config)
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "response_format": {"type": "json_object"},
        }
        key = os.environ.get(self.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            envelope = post_json(
                self.endpoint,
                payload,
                headers,
                deadline=deadline,
                clock=self._clock,
                max_bytes=self.config.max_reply_bytes,
            )
            raw = parse_reply(_content(envelope), self.config)
        except TransportError as exc:  # the body may echo the request, key included
            raise PluginError(self.name, redact(str(exc), [key] if key else [])) from None
        except SchemaViolation as exc:
            raise PluginError(self.name, f"reply rejected: {exc}") from None
        return self._ladders(raw, job, context, limit)

    def _ladders(
        self, raw: list[Any], job: Job, context: ProposalContext, limit: int
    ) -> list[Ladder | Rejection]:
        pools = {p.id: p for p in context.snapshot.pools}
        out: list[Ladder | Rejection] = []
        taken = 0
        for k, item in enumerate(raw):
            where = f"ladders[{k}]"
            try:
                spec = validate_ladder(item, where, self.config)
                ladder = self._build(spec, where, job, context, pools)
            except (SchemaViolation, KoiError) as exc:
                out.append(Rejection(self.name, f"reply {exc}"))
                continue
            policy = job.precision_problem(ladder)
            if policy is not None:
                out.append(Rejection(self.name, f"reply {where}: {policy}", ladder))
                continue
            if taken >= limit:
                out.append(Rejection(self.name, f"{where}: over the limit of {limit}", ladder))
                continue
            taken += 1
            out.append(ladder)
        return out

    @staticmethod
    def _build(
        spec: Mapping[str, Any],
        where: str,
        job: Job,
        context: ProposalContext,
        pools: Mapping[str, Pool],
    ) -> Ladder:
        ranks = []
        for r, rank in enumerate(spec["ranks"]):
            at = f"{where}.ranks[{r}]"
            pool = pools.get(rank["pool"])
            if pool is None:
                raise SchemaViolation(f"{at}.pool", f"unknown pool {rank['pool']!r}")
            if rank["gpu"] not in context.gpus:
                raise SchemaViolation(f"{at}.gpu", f"unknown GPU {rank['gpu']!r}")
            if rank["gpu"] != pool.environment.gpu:
                msg = f"{rank['gpu']!r} is not the GPU of pool {pool.id!r} ({pool.environment.gpu})"
                raise SchemaViolation(f"{at}.gpu", msg)
            if rank["model"] not in context.models:
                raise SchemaViolation(f"{at}.model", f"unknown model {rank['model']!r}")
            if rank["model"] != job.model:
                msg = f"{rank['model']!r} is not the job's model {job.model!r}"
                raise SchemaViolation(f"{at}.model", msg)
            try:
                config = Config(**rank["config"])
            except InvalidInput as exc:
                raise SchemaViolation(f"{at}.config", str(exc)) from None
            chain = Chain(model=job.model, environment=pool.environment, config=config)
            ranks.append(Rank(chain, rank["replicas"]))
        return Ladder(tuple(ranks))
