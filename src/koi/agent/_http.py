"""``/metrics``, ``/healthz`` and ``/status`` on a small threaded HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["AgentServer"]


class AgentServer:
    """Serves three read-only endpoints from callbacks; runs in a daemon thread.

    ``metrics()`` returns ``(body, content type)``; ``health()`` ``(ok, JSON body)``;
    ``status()`` a JSON-ready mapping.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics: Callable[[], tuple[bytes, str]],
        health: Callable[[], tuple[bool, dict[str, Any]]],
        status: Callable[[], dict[str, Any]],
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, bytes, str]]] = {
            "/metrics": lambda: (200, *metrics()),
            "/healthz": lambda: _health(health),
            "/status": lambda: (200, _json(status()), "application/json"),
        }

        class Handler(BaseHTTPRequestHandler):
            server_version = "koi-agent"

            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    code, body, kind = 404, b'{"error": "not found"}\n', "application/json"
                else:
                    try:
                        code, body, kind = route()
                    except Exception as exc:  # an endpoint must answer, not kill the thread
                        code, kind = 500, "application/json"
                        body = _json({"error": f"{type(exc).__name__}: {exc}"})
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # scrapes every few seconds would drown the structured log

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="koi-agent-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, allow_nan=False) + "\n").encode()


def _health(health: Callable[[], tuple[bool, dict[str, Any]]]) -> tuple[int, bytes, str]:
    ok, body = health()
    return (200 if ok else 503), _json(body), "application/json"
