"""Fake inference engines: a ``/metrics`` endpoint per engine, built with prometheus-client,
with histograms filled from latencies the test knows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# Bucket layouts like vLLM's defaults (seconds).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0)


class FakeEngine:
    """One engine replica's ``/metrics`` on 127.0.0.1 (a free port).

    ``prefix`` is ``"vllm:"``, ``"vllm_"`` or ``"sglang:"``; ``kv_cache=None`` leaves the
    KV-cache gauge out (a metric the plugin must report as missing, not as zero).
    """

    def __init__(
        self,
        prefix: str,
        model: str,
        *,
        kv_cache: float | None = 0.5,
        running: float = 8.0,
        waiting: float = 2.0,
    ) -> None:
        self.prefix, self.model = prefix, model
        r = self.registry = CollectorRegistry()
        sglang = prefix.startswith("sglang")
        labels = ["model_name"]

        def hist(name: str, buckets: Sequence[float]) -> Any:
            return Histogram(prefix + name, name, labels, buckets=buckets, registry=r).labels(model)

        def gauge(name: str) -> Any:
            return Gauge(prefix + name, name, labels, registry=r).labels(model)

        self.ttft = hist("time_to_first_token_seconds", TTFT_BUCKETS)
        self.itl = hist("inter_token_latency_seconds", TPOT_BUCKETS)
        self.e2e = hist("e2e_request_latency_seconds", E2E_BUCKETS)
        self.request_tpot = (
            None if sglang else hist("request_time_per_output_token_seconds", TPOT_BUCKETS)
        )
        self.tokens = Counter(prefix + "generation_tokens", "tokens", labels, registry=r).labels(
            model
        )
        # Gauges hold their value for the whole test, so their window means are exact.
        if kv_cache is not None:
            gauge("token_usage" if sglang else "kv_cache_usage_perc").set(kv_cache)
        gauge("num_running_reqs" if sglang else "num_requests_running").set(running)
        gauge("num_queue_reqs" if sglang else "num_requests_waiting").set(waiting)
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=r)
        self.port = int(self.server.server_port)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def serve(
        self,
        *,
        ttft: Sequence[float],
        itl: Sequence[float],
        e2e: Sequence[float],
        request_tpot: Sequence[float],
        tokens: int,
    ) -> None:
        for x in ttft:
            self.ttft.observe(x)
        for x in itl:
            self.itl.observe(x)
        for x in e2e:
            self.e2e.observe(x)
        if self.request_tpot is not None:
            for x in request_tpot:
                self.request_tpot.observe(x)
        self.tokens.inc(tokens)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
