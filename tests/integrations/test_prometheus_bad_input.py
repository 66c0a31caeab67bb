"""Bad answers from Prometheus: each gives a clear message and a safe result, never a zero.

A stub of Prometheus' query API on 127.0.0.1 answers each query as the test says: NaN or
negative samples, a time-out, an API error, garbage; a closed port stands for an unreachable
server.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from koi.errors import InvalidInput
from koi.integrations.prometheus import (
    PrometheusError,
    PrometheusTelemetry,
    RankRule,
    Unreachable,
    histogram_quantile,
)
from koi.plugins import PluginHost, make_plugin_manager
from koi.testing.fakes import example_pools
from koi.types import Chain, Config, Rank

from ._prometheus import free_port

Answer = Callable[[str], tuple[int, Any, float]]
RANK = Rank(Chain("Llama-3.1-8B", example_pools()[0].environment, Config()), 2)
WINDOW = (1000.0, 1060.0)


def vector(*samples: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1060.0, v]} for m, v in samples],
        },
    }


def healthy(query: str) -> tuple[int, Any, float]:
    """A plausible vLLM fleet: one replica of model m, 60 s window."""
    m = {"model_name": "m"}
    if "time_to_first_token_seconds_bucket" in query:
        rates = [("0.1", "1"), ("0.25", "9"), ("0.5", "9.9"), ("+Inf", "10")]
        return 200, vector(*[({**m, "le": le}, v) for le, v in rates]), 0
    if "_bucket" in query:
        fast = [("0.05", "9.95"), ("+Inf", "10")]
        return 200, vector(*[({**m, "le": le}, v) for le, v in fast]), 0
    if query.startswith("group"):
        return 200, vector(({**m, "instance": "a"}, "1"), ({**m, "instance": "b"}, "1")), 0
    if "avg_over_time" in query:
        return 200, vector(({**m, "instance": "a"}, "0.5"), ({**m, "instance": "b"}, "0.7")), 0
    return 200, vector((m, "100")), 0


class StubPrometheus:
    def __init__(self) -> None:
        self.answer: Answer = healthy
        self.queries: list[str] = []
        self.stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)["query"][0]
                stub.queries.append(query)
                code, body, delay = stub.answer(query)
                if delay:
                    stub.stopping.wait(delay)
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass  # the client gave up (time-out test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub() -> Iterator[StubPrometheus]:
    s = StubPrometheus()
    yield s
    s.stop()


def plugin(url: str, **kw: Any) -> PrometheusTelemetry:
    kw.setdefault("models", {"Llama-3.1-8B": "m"})
    return PrometheusTelemetry(url, **kw)


def test_healthy_answers_make_an_observation(stub: StubPrometheus) -> None:
    (o,) = plugin(stub.url).koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert o.requests == 600
    assert o.completed == 600
    assert o.replicas_up == 2
    assert o.healthy
    assert o.outcomes.p99_ttft_ms == pytest.approx(500.0)  # 0.25 + 0.25 * (0.9 / 0.9) s
    bounds = o.bounds("p99_ttft_ms")
    assert bounds is not None
    assert (bounds.low, bounds.high) == (250.0, 500.0)
    assert o.mediators.kv_cache_util == pytest.approx(0.6)
    assert o.outcomes.throughput_tok_s == 100.0
    assert o.measured("preemption_rate") == pytest.approx(50.0)  # 100 /s over 2 replicas
    assert all("model_name=~" not in q for q in stub.queries)
    assert any('__name__=~"vllm[:_]time_to_first_token_seconds_bucket"' in q for q in stub.queries)


def test_nan_and_negative_values_are_missing_with_a_note(
    stub: StubPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(query: str) -> tuple[int, Any, float]:
        m = {"model_name": "m", "instance": "a"}
        if "kv_cache" in query:
            return 200, vector((m, "NaN")), 0
        if "num_requests_waiting" in query and "avg_over_time" in query:
            return 200, vector((m, "-3")), 0
        if "generation_tokens" in query:
            return 200, vector(({"model_name": "m"}, "+Inf")), 0
        return healthy(query)

    stub.answer = answer
    source = plugin(stub.url)
    with caplog.at_level(logging.WARNING, logger="koi.integrations.prometheus"):
        (o,) = source.koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert {"kv_cache_util", "queue_depth", "throughput_tok_s", "cost_per_mtok_usd"} <= set(
        o.missing
    )
    assert o.measured("kv_cache_util") is None
    assert o.measured("p99_ttft_ms") == pytest.approx(500.0)  # the rest is still measured
    text = caplog.text
    assert "kv = nan dropped" in text
    assert "waiting = -3.0 dropped" in text


def test_a_missing_metric_is_missing_not_zero(stub: StubPrometheus) -> None:
    def answer(query: str) -> tuple[int, Any, float]:
        if "kv_cache" in query or "preemptions" in query or "inter_token" in query:
            return 200, vector(), 0
        return healthy(query)

    stub.answer = answer
    (o,) = plugin(stub.url).koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert "kv_cache_util" in o.missing
    assert "preemption_rate" in o.missing
    assert o.measured("p99_tpot_ms") is not None  # per-request TPOT is there


def test_no_request_counts_means_no_observation(stub: StubPrometheus) -> None:
    stub.answer = lambda q: (200, vector(), 0) if "_bucket" in q else healthy(q)
    source = plugin(stub.url)
    assert list(source.koi_collect_telemetry([("chat", RANK)], WINDOW)) == []
    (w,) = source.last_windows
    assert w.requests is None
    assert w.latency_ms == {}


def test_a_query_that_times_out_is_missing_and_said(
    stub: StubPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    stub.answer = lambda q: (200, vector(), 3.0) if "kv_cache" in q else healthy(q)
    source = plugin(stub.url, timeout_s=0.3)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="koi.integrations.prometheus"):
        (o,) = source.koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert time.monotonic() - t0 < 2.5
    assert "kv_cache_util" in o.missing
    assert "timed out after 0.3 s" in caplog.text


def test_the_budget_bounds_a_collection(stub: StubPrometheus) -> None:
    stub.answer = lambda q: (200, vector(), 0.25) if "_bucket" in q else healthy(q)
    source = plugin(stub.url, timeout_s=1.0, budget_s=0.3)
    t0 = time.monotonic()
    list(source.koi_collect_telemetry([("chat", RANK)], WINDOW))
    assert time.monotonic() - t0 < 1.5
    assert any("budget was spent" in n for n in source.last_notes)


def test_unreachable_prometheus_raises_a_clear_error() -> None:
    source = plugin(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(Unreachable, match="unreachable"):
        source.read([("chat", RANK)], WINDOW)


def test_unreachable_prometheus_is_a_reported_plugin_error_not_a_crash() -> None:
    source = plugin(f"http://127.0.0.1:{free_port()}")
    host = PluginHost(make_plugin_manager(plugins=[source], entry_points=False))
    batch = host.collect_telemetry([("chat", RANK)], WINDOW)
    assert batch.observations == ()
    (err,) = batch.errors
    assert err.plugin == "koi.prometheus"
    assert "unreachable" in str(err)


@pytest.mark.parametrize(
    ("code", "body", "needle"),
    [
        (400, {"status": "error", "errorType": "bad_data", "error": "parse error"}, "parse error"),
        (200, b"<html>proxy login</html>", "not JSON"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "matrix"),
        (503, b"", "HTTP 503"),
    ],
)
def test_every_query_failing_is_one_clear_error(
    stub: StubPrometheus, code: int, body: Any, needle: str
) -> None:
    stub.answer = lambda q: (code, body, 0)
    with pytest.raises(PrometheusError, match=needle) as info:
        plugin(stub.url).read([("chat", RANK)], WINDOW)
    assert "queries failed" in str(info.value)


def test_nothing_deployed_sends_no_query(stub: StubPrometheus) -> None:
    assert list(plugin(stub.url).koi_collect_telemetry([], WINDOW)) == []
    assert stub.queries == []


def test_rules_map_ranks_to_label_values(stub: StubPrometheus) -> None:
    rules = [
        {"job": "batch-*", "labels": {"namespace": "llm", "deployment": "{job}"}},
        {"gpu": "H100*", "labels": {"namespace": "llm", "deployment": "{job}-{pool_slug}-tp{tp}"}},
    ]

    def answer(query: str) -> tuple[int, Any, float]:
        assert "by (le, deployment, namespace" in query or "_bucket" not in query
        labels = {"namespace": "llm", "deployment": "chat-aws-us-east-1-on-demand-p5-48xlarge-tp1"}
        if "_bucket" in query:
            return 200, vector(({**labels, "le": "1"}, "5"), ({**labels, "le": "+Inf"}, "5")), 0
        return 200, vector(({**labels, "instance": "x"}, "1")), 0

    stub.answer = answer
    (o,) = plugin(stub.url, rules=rules).koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert o.requests == 300


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"url": "prometheus:9090"}, "url: must be an http"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"rules": [{"labels": {}}]}, "rules[0].labels"),
        ({"rules": [{"labels": {"ns": "{nope}"}}]}, "unknown placeholder {nope}"),
        ({"rules": [{"labels": {"ns": "x"}, "jobs": "a"}]}, "unknown key(s) ['jobs']"),
        ({"rules": [{"labels": {"bad-label": "x"}}]}, "not a Prometheus label name"),
        ({"selector": '{namespace="x"}'}, "bare matchers"),
        ({"replica_label": "not a label"}, "replica_label"),
        ({"min_replica_requests": 0}, "min_replica_requests: must be >= 1"),
        ({"min_replica_requests": 2.5}, "min_replica_requests: must be an integer"),
    ],
)
def test_bad_configuration_names_the_setting(kwargs: dict[str, Any], needle: str) -> None:
    kwargs.setdefault("url", "http://127.0.0.1:9090")
    with pytest.raises(InvalidInput) as info:
        PrometheusTelemetry(**kwargs)
    assert needle in str(info.value)


def test_rank_rule_globs() -> None:
    rule = RankRule(labels={"d": "{job}"}, job="chat*", gpu="H100*")
    assert rule.matches("chat-1", RANK.chain)
    assert not rule.matches("batch", RANK.chain)


@pytest.mark.parametrize(
    ("buckets", "q", "expected"),
    [
        ([(0.1, 2.0), (0.2, 6.0), (float("inf"), 8.0)], 0.5, (0.15, 0.1, 0.2)),
        ([(0.1, 0.0), (0.2, 0.0), (float("inf"), 0.0)], 0.99, None),  # no traffic: NaN in PromQL
        ([(0.1, 1.0), (float("inf"), 10.0)], 0.99, (0.1, 0.1, float("inf"))),  # in +Inf
        ([(0.1, 5.0), (0.2, 4.0), (float("inf"), 10.0)], 0.5, (0.1, 0.0, 0.1)),  # non-monotonic
        ([(0.1, 5.0), (0.2, 10.0)], 0.5, None),  # no +Inf bucket
    ],
)
def test_histogram_quantile_matches_promql(
    buckets: list[tuple[float, float]], q: float, expected: tuple[float, float, float] | None
) -> None:
    est = histogram_quantile(q, buckets)
    if expected is None:
        assert est is None
    else:
        assert est is not None
        assert (est.value, est.low, est.high) == pytest.approx(expected)


def test_the_prefix_hit_rate_is_hits_over_queries(stub: StubPrometheus) -> None:
    def answer(query: str) -> tuple[int, Any, float]:
        m = {"model_name": "m"}
        if "prefix_cache_hits" in query:
            return 200, vector((m, "300")), 0
        if "prefix_cache_queries" in query:
            return 200, vector((m, "1000")), 0
        return healthy(query)

    stub.answer = answer
    (o,) = plugin(stub.url).koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert o.measured("prefix_hit_rate") == pytest.approx(0.3)
    assert any('vllm[:_]prefix_cache_hits_total"' in q and "rate(" in q for q in stub.queries)


def test_the_prefix_hit_rate_gauge_stands_in_and_absence_is_missing(stub: StubPrometheus) -> None:
    def gauge_only(query: str) -> tuple[int, Any, float]:
        if "prefix_cache_hits" in query or "prefix_cache_queries" in query:
            return 200, vector(), 0
        if "gpu_prefix_cache_hit_rate" in query:
            return 200, vector(({"model_name": "m", "instance": "a"}, "0.4")), 0
        return healthy(query)

    stub.answer = gauge_only
    (o,) = plugin(stub.url).koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert o.measured("prefix_hit_rate") == pytest.approx(0.4)

    stub.answer = lambda q: (200, vector(), 0) if "prefix" in q else healthy(q)
    (o,) = plugin(stub.url).koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert "prefix_hit_rate" in o.missing
    assert o.measured("prefix_hit_rate") is None


def test_sglang_reports_its_cache_hit_rate_gauge(stub: StubPrometheus) -> None:
    sglang = Rank(Chain("Llama-3.1-8B", RANK.chain.environment, Config(engine="sglang")), 1)

    def answer(query: str) -> tuple[int, Any, float]:
        if "sglang[:_]cache_hit_rate" in query:
            return 200, vector(({"model_name": "m", "instance": "a"}, "0.55")), 0
        return healthy(query)

    stub.answer = answer
    (o,) = plugin(stub.url).koi_collect_telemetry([("chat", sglang)], WINDOW)
    assert o.measured("prefix_hit_rate") == pytest.approx(0.55)
