"""Structured logs: one JSON object per line, for the agent's own events and koi's loggers."""

from __future__ import annotations

import datetime
import json
import logging
import math
import sys
import threading
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["JsonLog", "clean"]


def clean(value: Any) -> Any:
    """JSON-safe data: non-finite floats become ``None``, other objects their ``str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [clean(v) for v in value]
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)


class JsonLog:
    """Writes ``{"ts": ..., "level": ..., "event": ..., ...}`` lines to ``stream``.

    :meth:`capture` forwards records of the ``koi`` loggers (plugins log there) as
    ``"event": "log"`` lines, so everything the agent prints is one format.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._handler: logging.Handler | None = None

    def event(self, event: str, *, level: str = "info", **fields: Any) -> None:
        now = datetime.datetime.now(datetime.UTC)
        record = {"ts": now.isoformat(timespec="milliseconds"), "level": level, "event": event}
        record.update(clean(fields))
        line = json.dumps(record, sort_keys=False, allow_nan=False)
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()

    def capture(self, logger_name: str = "koi") -> None:
        """Route the records of ``logger_name`` and its children into this log."""
        log = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    log.event(
                        "log",
                        level=record.levelname.lower(),
                        logger=record.name,
                        message=record.getMessage(),
                    )
                except Exception:  # a log line must never take the agent down
                    self.handleError(record)

        handler = _Handler(level=logging.INFO)
        logger = logging.getLogger(logger_name)
        logger.addHandler(handler)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.propagate = False
        self._handler = handler

    def release(self, logger_name: str = "koi") -> None:
        if self._handler is not None:
            logging.getLogger(logger_name).removeHandler(self._handler)
            logging.getLogger(logger_name).propagate = True
            self._handler = None
