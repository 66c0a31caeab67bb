"""Fixtures for the plugin tests: a fresh fleet and a local fake chat-completions server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from koi.beliefs import Beta
from koi.dag import CausalDag, EdgeKey, Mechanism, Scope, mechanism_id
from koi.plugins import ProposalContext
from koi.selector import BudgetBook
from koi.testing.fakes import example_gpus, example_models, example_snapshot
from koi.types import ClusterSnapshot, Job

Reply = Callable[[dict[str, Any]], tuple[int, bytes, float]]

_KV_EDGES: tuple[EdgeKey, ...] = (
    ("x:max_batch_size", "v:kv_cache_util"),
    ("v:kv_cache_util", "y:p99_ttft_ms"),
)
#: What the LLM proposer's prompt carries for the graph and the mechanisms in these tests.
TTFT_VIEW = CausalDag.from_edges(
    [(*_KV_EDGES[0], "the cap fills the cache"), (*_KV_EDGES[1], "a full cache queues prefills")]
).view()
KV_PRESSURE = Mechanism(
    mechanism_id(_KV_EDGES, Scope.parse("gpu == L4")),
    _KV_EDGES,
    Scope.parse("gpu == L4"),
    "kv pressure raises TTFT on L4",
    Beta.uniform(),
)


class FakeChatServer:
    """A chat-completions endpoint on 127.0.0.1 whose answer each test sets.

    ``reply(request) -> (status, body, delay_s)``; every request body and header set is kept.
    A delayed answer wakes early when the server stops, so teardown never waits.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.reply: Reply = lambda _req: (200, b"{}", 0.0)
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length))
                server.requests.append(request)
                server.headers.append(dict(self.headers.items()))
                status, body, delay = server.reply(request)
                if delay and server.stopping.wait(delay):
                    return
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (deadline); nothing to tell it

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def answer(self, content: Any, *, status: int = 200, delay: float = 0.0) -> None:
        """Reply with a chat completion whose message content is ``content`` (JSON-encoded
        unless it is already a string)."""
        text = content if isinstance(content, str) else json.dumps(content)
        envelope = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        body = json.dumps(envelope).encode()
        self.reply = lambda _req: (status, body, delay)


@pytest.fixture
def chat_server() -> Iterator[FakeChatServer]:
    server = FakeChatServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(timeout=5)


@pytest.fixture
def snapshot() -> ClusterSnapshot:
    return example_snapshot()


@pytest.fixture
def context(snapshot: ClusterSnapshot) -> ProposalContext:
    return ProposalContext(
        snapshot=snapshot,
        gpus=example_gpus(),
        models=example_models(),
        deadline_s=time.monotonic() + 30.0,
        budget=BudgetBook(job_id="chat", pools=(), gpu_types=("L4",), max_gpus=4),
        dag=TTFT_VIEW,
        mechanisms=(KV_PRESSURE,),
        feedback=("round 0: tp=1 on L4 breached p99 TTFT",),
        at_risk=("y:p99_ttft_ms",),
        round=1,
        max_candidates=4,
    )


@pytest.fixture
def chat_job(snapshot: ClusterSnapshot) -> Job:
    return snapshot.job("chat")
