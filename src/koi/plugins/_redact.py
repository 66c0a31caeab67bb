"""Secrets out of error strings: a server's error body may echo the API key it was sent.

Every error a tick reports passes through :func:`redact`.  It removes the values of the
environment variables whose names say they hold a secret (``OPENAI_API_KEY``, ``*_TOKEN``, ...),
any value given explicitly, and what looks like a credential whatever its source: a bearer
token, an ``sk-``-style key, the value of an ``api_key=`` / ``"token": ...`` pair.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["REDACTED", "redact"]

REDACTED = "[redacted]"

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# Shorter values are too likely to be ordinary words or numbers in a message.
_MIN_SECRET_LEN = 8
_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"),
    re.compile(r"\b(sk|pk|rk|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{8,}"),
    re.compile(
        r"(?i)(\b(?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|"
        r"authorization)[\"']?\s*[:=]\s*[\"']?)([^\s\"',;&}]{4,})"
    ),
)


def _secret_values(environ: Mapping[str, str], given: Iterable[str]) -> list[str]:
    values = {v for v in given if len(v) >= _MIN_SECRET_LEN}
    values.update(
        v for k, v in environ.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LEN
    )
    return sorted(values, key=len, reverse=True)  # longest first: no partial leftovers


def redact(
    text: str, secrets: Iterable[str] = (), *, environ: Mapping[str, str] | None = None
) -> str:
    """``text`` with every secret replaced by ``[redacted]``.

    ``secrets`` are values to remove wherever they appear; ``environ`` (default: the process
    environment, read at call time) supplies the values of secret-named variables.
    """
    for value in _secret_values(os.environ if environ is None else environ, secrets):
        text = text.replace(value, REDACTED)
    bearer, prefixed, pair = _PATTERNS
    text = bearer.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = prefixed.sub(REDACTED, text)
    return pair.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
