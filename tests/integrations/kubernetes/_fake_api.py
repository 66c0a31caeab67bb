"""An in-process fake Kubernetes API server on 127.0.0.1 for the official client.

It speaks the part of the API the koi launcher uses: list nodes and pods; get, list, delete
and server-side apply (``application/apply-patch+yaml``, ``fieldManager``, ``dryRun=All``,
``force``) Deployments, LeaderWorkerSets and Services.  Applied objects are validated like
the real server would (strict Kubernetes 1.30 schemas, the LWS v1 schema): an invalid object
is a 422.  Tests steer it:

- ``ready_cap[name]``: at most this many replicas of the workload ever become ready
  (``ready_cap_default`` for the others; ``None``: all of them, at once);
- ``owners[name]``: another field manager owns ``spec.replicas`` of that workload, so an
  apply that changes it without ``force`` is a 409 conflict;
- ``failures``: ``(method, path fragment, status, message)`` answers to inject;
- ``hang``: path fragments whose requests get no answer for ``hang_s`` seconds;
- ``lws_installed = False``: the LeaderWorkerSet CRD is missing (404s).

``requests`` records every call as ``(method, path, query)``.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.integrations.kubernetes._schemas import validate, warm_up

_APPLY = "application/apply-patch+yaml"
_LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/"
_KINDS = {
    "deployments": ("Deployment", "apps/v1"),
    "leaderworkersets": ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1"),
    "services": ("Service", "v1"),
}


def gpu_node(
    name: str,
    *,
    gpus: int = 4,
    labels: dict[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A node as the API server returns it."""
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"unschedulable": unschedulable, "taints": list(taints or [])},
        "status": {
            "allocatable": {"cpu": "47", "memory": "180Gi", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "code": code,
        "message": message,
    }


class FakeCluster:
    """State of the fake cluster and the HTTP server in front of it."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.ready_cap: dict[str, int] = {}
        self.ready_cap_default: int | None = None
        self.owners: dict[str, str] = {}
        self.failures: list[tuple[str, str, int, str]] = []
        self.hang: set[str] = set()
        self.hang_s = 2.0
        self.lws_installed = True
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> str:
        warm_up()  # build the schema validators now, not inside a client's request timeout
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                cluster._handle(self)

            do_PATCH = do_DELETE = do_POST = do_PUT = do_GET  # noqa: N815 (http.server's names)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- state helpers ---------------------------------------------------------------------------

    def workload(self, name: str) -> dict[str, Any] | None:
        for (kind, _, n), obj in self.objects.items():
            if n == name and kind != "services":
                return self._with_status(obj)
        return None

    def calls(self, method: str = "", fragment: str = "") -> list[tuple[str, str, dict[str, str]]]:
        return [r for r in self.requests if r[0].startswith(method) and fragment in r[1]]

    def _with_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        if out["kind"] == "Service":
            return out
        want = int(out["spec"].get("replicas", 1))
        cap = self.ready_cap.get(out["metadata"]["name"], self.ready_cap_default)
        ready = want if cap is None else min(want, cap)
        status: dict[str, Any] = {"replicas": want, "readyReplicas": ready, "updatedReplicas": want}
        if out["kind"] == "Deployment":
            status["observedGeneration"] = out["metadata"]["generation"]
        out["status"] = status
        return out

    # -- HTTP -----------------------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((h.command, url.path, query))
        if any(f in url.path for f in self.hang):
            time.sleep(self.hang_s)
        for method, fragment, code, message in self.failures:
            if h.command == method and fragment in url.path:
                return self._send(h, code, _status(code, "InternalError", message))
        try:
            with self.lock:
                code, out = self._route(h.command, url.path, query, h.headers, body)
        except Exception as exc:  # a bug in the fake must show, not hang the client
            code, out = 500, _status(500, "InternalError", f"fake server: {exc!r}")
        self._send(h, code, out)
        return None

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, out: dict[str, Any]) -> None:
        data = json.dumps(out).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _route(
        self, method: str, path: str, query: dict[str, str], headers: Any, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if path == "/api/v1/nodes" and method == "GET":
            return 200, {"kind": "NodeList", "apiVersion": "v1", "items": self.nodes}
        if path == "/api/v1/pods" and method == "GET":
            return 200, {"kind": "PodList", "apiVersion": "v1", "items": self.pods}
        pod = path.removeprefix("/api/v1/namespaces/").split("/")
        if method == "DELETE" and len(pod) == 3 and pod[1] == "pods":
            ns, _, name = pod
            left = [
                p
                for p in self.pods
                if (p["metadata"]["namespace"], p["metadata"]["name"]) != (ns, name)
            ]
            if len(left) == len(self.pods):
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            self.pods = left
            return 200, {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name}}
        if path.startswith(_LWS) and not self.lws_installed:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        parts = path.strip("/").split("/")
        # .../namespaces/{ns}/{plural}[/{name}]
        if "namespaces" not in parts:
            return 404, _status(404, "NotFound", f"no route for {path}")
        i = parts.index("namespaces")
        ns, plural = parts[i + 1], parts[i + 2]
        name = parts[i + 3] if len(parts) > i + 3 else None
        if plural not in _KINDS:
            return 404, _status(404, "NotFound", f"no resource {plural}")
        kind, api_version = _KINDS[plural]
        key = (plural, ns, name or "")
        if method == "GET" and name is None:
            items = [
                self._with_status(o)
                for (p, n, _), o in sorted(self.objects.items())
                if p == plural and n == ns and _selects(query.get("labelSelector", ""), o)
            ]
            return 200, {"kind": f"{kind}List", "apiVersion": api_version, "items": items}
        if method == "GET":
            if key not in self.objects:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            return 200, self._with_status(self.objects[key])
        if method == "DELETE":
            if self.objects.pop(key, None) is None:
                return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
            return 200, _status(200, "", "deleted") | {"status": "Success"}
        if method == "PATCH":
            return self._apply(key, kind, api_version, query, headers, body)
        return 405, _status(405, "MethodNotAllowed", method)

    def _apply(
        self,
        key: tuple[str, str, str],
        kind: str,
        api_version: str,
        query: dict[str, str],
        headers: Any,
        body: bytes,
    ) -> tuple[int, dict[str, Any]]:
        if headers.get("Content-Type") != _APPLY:
            return 415, _status(415, "UnsupportedMediaType", "koi must server-side apply")
        manager = query.get("fieldManager")
        if not manager:
            return 400, _status(400, "BadRequest", "fieldManager is required for apply")
        obj = json.loads(body)
        name = key[2]
        if obj.get("kind") != kind or obj.get("apiVersion") != api_version:
            return 400, _status(400, "BadRequest", f"body is not a {kind}")
        if obj["metadata"].get("name") != name or obj["metadata"].get("namespace") != key[1]:
            return 400, _status(400, "BadRequest", "name or namespace differs from the URL")
        try:
            validate(obj, "1.30", fast=True)
        except Exception as exc:
            message = f"{kind} {name!r} is invalid: {getattr(exc, 'message', exc)}"
            return 422, _status(422, "Invalid", message)
        old = self.objects.get(key)
        force = query.get("force") == "true"
        owner = self.owners.get(name)
        taken = old is not None and owner and owner != manager and not force
        if taken and obj["spec"].get("replicas") != old["spec"].get("replicas"):  # type: ignore[index]
            message = (
                f'Apply failed with 1 conflict: conflict with "{owner}" using '
                f"{api_version}: .spec.replicas"
            )
            return 409, _status(409, "Conflict", message)
        new = copy.deepcopy(obj)
        generation = 1
        if old is not None:
            generation = old["metadata"]["generation"] + (old["spec"] != new["spec"])
        new["metadata"]["generation"] = generation
        if query.get("dryRun") == "All":
            return 200, self._with_status(new)
        if force and owner:
            self.owners[name] = manager
        self.objects[key] = new
        return (201 if old is None else 200), self._with_status(new)


def _selects(selector: str, obj: dict[str, Any]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        if "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    return True
