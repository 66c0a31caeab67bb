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

#: the prefixes of TensorRT-LLM's trtllm-serve: none in its first releases, ``trtllm_`` later
TRTLLM_PREFIXES = ("", "trtllm_")


class FakeEngine:
    """One engine replica's ``/metrics`` on 127.0.0.1 (a free port).

    ``prefix`` is ``"vllm:"``, ``"vllm_"``, ``"sglang:"``, or ``"trtllm_"`` / ``""`` for
    TensorRT-LLM's trtllm-serve; ``kv_cache=None`` leaves the KV-cache gauge out (a metric the
    plugin must report as missing, not as zero).  trtllm-serve exports only its request-level
    families (TTFT, per-request time per output token, end-to-end latency, queue time, a
    success counter), labelled ``model_name="undefined"``: no gauges and no token counter.
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
        self.trtllm = prefix in TRTLLM_PREFIXES
        labels = ["model_name", "engine_type"] if self.trtllm else ["model_name"]
        values = ["undefined", "undefined"] if self.trtllm else [model]

        def hist(name: str, buckets: Sequence[float]) -> Any:
            return Histogram(prefix + name, name, labels, buckets=buckets, registry=r).labels(
                *values
            )

        def gauge(name: str) -> Any:
            return Gauge(prefix + name, name, labels, registry=r).labels(*values)

        self.ttft = hist("time_to_first_token_seconds", TTFT_BUCKETS)
        self.e2e = hist("e2e_request_latency_seconds", E2E_BUCKETS)
        self.itl: Any = None
        self.request_tpot: Any = None
        self.tokens: Any = None
        self.success: Any = None
        if self.trtllm:
            self.request_tpot = hist("time_per_output_token_seconds", TPOT_BUCKETS)
            self.queue = hist("request_queue_time_seconds", E2E_BUCKETS)
            self.success = Counter(
                prefix + "request_success", "requests", [*labels, "finished_reason"], registry=r
            ).labels(*values, "stop")
        else:
            self.itl = hist("inter_token_latency_seconds", TPOT_BUCKETS)
            if not sglang:
                self.request_tpot = hist("request_time_per_output_token_seconds", TPOT_BUCKETS)
            self.tokens = Counter(prefix + "generation_tokens", "tokens", labels, registry=r)
            self.tokens = self.tokens.labels(*values)
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
        if self.itl is not None:
            for x in itl:
                self.itl.observe(x)
        for x in e2e:
            self.e2e.observe(x)
            if self.success is not None:
                self.success.inc()
                self.queue.observe(0.0)
        if self.request_tpot is not None:
            for x in request_tpot:
                self.request_tpot.observe(x)
        if self.tokens is not None:
            self.tokens.inc(tokens)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
