"""One JSON POST with a hard wall-clock deadline, on the standard library only.

Two guards make the deadline hard: every socket operation times out at the time left, and a
watchdog timer shuts the socket down at the deadline, so a server that trickles bytes cannot
stretch a call past it.  There are no retries: the proposer has one shot per round.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["TransportError", "post_json"]

_CHUNK = 65536


class TransportError(Exception):
    """The request failed: no answer, a late answer, an HTTP error or an unreadable body."""


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TransportError(f"not an http(s) URL: {url!r}")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    if parts.scheme == "https":
        ctx = ssl.create_default_context()
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ctx
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    return conn, path


def _kill(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        # Already closed means there is nothing left to interrupt.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def post_json(
    url: str,
    payload: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    deadline: float,
    clock: Callable[[], float],
    max_bytes: int,
) -> Any:
    """POST ``payload`` as JSON and return the decoded JSON answer, before ``deadline``.

    Raises
    ------
    TransportError
        Deadline reached, connection failure, non-2xx status, body over ``max_bytes`` or not
        JSON.  The message says which.
    """
    remaining = deadline - clock()
    if remaining <= 0:
        raise TransportError("deadline passed before the request was sent")
    body = json.dumps(payload).encode()
    conn, path = _connection(url, remaining)
    watchdog = threading.Timer(remaining, _kill, args=(conn,))
    watchdog.daemon = True
    watchdog.start()
    response: http.client.HTTPResponse | None = None
    try:
        conn.request(
            "POST", path, body=body, headers={"Content-Type": "application/json", **headers}
        )
        response = conn.getresponse()
        status, reason = response.status, response.reason
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - clock()
            if left <= 0:
                raise TransportError("timed out while reading the reply")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise TransportError(f"reply larger than {max_bytes} bytes")
            chunks.append(chunk)
        # The watchdog ends a stalled read with an EOF, which looks like a short body.
        if clock() >= deadline:
            raise TransportError(f"timed out after {remaining:.3g} s")
        if response.length:
            raise TransportError(f"reply cut short ({response.length} bytes missing)")
    except (OSError, http.client.HTTPException) as exc:
        if clock() >= deadline:
            raise TransportError(f"timed out after {remaining:.3g} s") from None
        raise TransportError(f"request failed: {type(exc).__name__}: {exc}") from None
    finally:
        watchdog.cancel()
        if response is not None:
            response.close()  # it holds the socket's file object; close both
        conn.close()
    raw = b"".join(chunks)
    if not 200 <= status < 300:
        text = raw[:200].decode("utf-8", "replace")
        raise TransportError(f"HTTP {status} {reason}: {text}")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TransportError(f"response body is not JSON: {exc}") from None
