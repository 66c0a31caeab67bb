"""Which metric families each inference engine exposes, under every spelling seen in the wild.

vLLM registers names with a colon (``vllm:time_to_first_token_seconds``); some exporters,
OpenTelemetry pipelines and newer Prometheus name translations store them with an underscore
(``vllm_time_to_first_token_seconds``).  Every family is therefore a regular expression on
``__name__`` (PromQL anchors it), e.g. ``vllm[:_]time_to_first_token_seconds``.  Renamed metrics
are alternatives in one expression (vLLM's ``gpu_cache_usage_perc`` became ``kv_cache_usage_perc``;
``time_per_output_token_seconds`` became ``inter_token_latency_seconds``).

TensorRT-LLM's ``trtllm-serve`` (1.2.1, the release koi launches) exports at
``/prometheus/metrics`` only request-level families: time to first token, time per output token
(per request), end-to-end latency, queue time and a success counter, labelled
``model_name="undefined"`` (so its ranks need rules on the scrape target's labels, which also
keep the generic unprefixed names apart from other exporters').  Its first releases named them
without a prefix, later ones with ``trtllm_`` (and NVIDIA Dynamo re-exports them as
``trtllm:``), so the expressions take all three.  It has no generated-token counter, KV-cache,
running or waiting gauge and no per-token inter-token latency: those fields are ``None`` and
what they measure is reported missing.
"""

from __future__ import annotations

import attrs

__all__ = ["ENGINES", "EngineMetrics"]


@attrs.frozen
class EngineMetrics:
    """Metric-name expressions of one engine (``None``: the engine has no such metric, which is
    then not queried and is reported missing).

    Histograms are named without the ``_bucket`` suffix; counters with their ``_total``.  Only
    ``ttft`` is required: its ``+Inf`` bucket counts the requests and tells which replicas are
    up (with ``running`` where the engine has it).

    - ``ttft``, ``itl``, ``e2e``: time to first token, inter-token latency and end-to-end
      request latency histograms (seconds).
    - ``request_tpot``: per-request time per output token histogram (seconds), which is what
      koi's ``p99_tpot_ms`` means; where an engine lacks it the inter-token latency stands in.
    - ``generation_tokens``: generated-token counter (output throughput).
    - ``kv_cache``: KV-cache use gauge, a fraction in [0, 1].
    - ``running`` / ``waiting``: requests in the running batch / in the queue (gauges).
    - ``preemptions``: preemption counter.
    - ``prefix_hits`` / ``prefix_queries``: prefix-cache counters of prompt tokens found in the
      cache / looked up (their ratio is the hit rate); ``prefix_hit_rate``: a hit-rate gauge, a
      fraction, where an engine (or an older version) exports only that.

    .. versionadded:: 0.1
    """

    ttft: str
    itl: str | None = None
    e2e: str | None = None
    generation_tokens: str | None = None
    kv_cache: str | None = None
    running: str | None = None
    waiting: str | None = None
    request_tpot: str | None = None
    preemptions: str | None = None
    prefix_hits: str | None = None
    prefix_queries: str | None = None
    prefix_hit_rate: str | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(
            n
            for n in (
                self.ttft,
                self.itl,
                self.e2e,
                self.request_tpot,
                self.generation_tokens,
                self.kv_cache,
                self.running,
                self.waiting,
                self.preemptions,
                self.prefix_hits,
                self.prefix_queries,
                self.prefix_hit_rate,
            )
            if n is not None
        )


VLLM = EngineMetrics(
    ttft="vllm[:_]time_to_first_token_seconds",
    itl="vllm[:_](?:inter_token_latency_seconds|time_per_output_token_seconds)",
    e2e="vllm[:_]e2e_request_latency_seconds",
    request_tpot="vllm[:_]request_time_per_output_token_seconds",
    generation_tokens="vllm[:_]generation_tokens_total",
    kv_cache="vllm[:_](?:kv_cache_usage_perc|gpu_cache_usage_perc)",
    running="vllm[:_]num_requests_running",
    waiting="vllm[:_]num_requests_waiting",
    preemptions="vllm[:_]num_preemptions_total",
    prefix_hits="vllm[:_]prefix_cache_hits_total",
    prefix_queries="vllm[:_]prefix_cache_queries_total",
    prefix_hit_rate="vllm[:_]gpu_prefix_cache_hit_rate",  # vLLM's V0 engine
)

SGLANG = EngineMetrics(
    ttft="sglang[:_]time_to_first_token_seconds",
    itl="sglang[:_](?:inter_token_latency_seconds|time_per_output_token_seconds)",
    e2e="sglang[:_]e2e_request_latency_seconds",
    generation_tokens="sglang[:_]generation_tokens_total",
    kv_cache="sglang[:_]token_usage",
    running="sglang[:_]num_running_reqs",
    waiting="sglang[:_]num_queue_reqs",
    prefix_hit_rate="sglang[:_]cache_hit_rate",
)

#: ``trtllm-serve``'s: its time per output token is per request, ``(last - first token) /
#: (output tokens - 1)``, which is koi's TPOT
TRTLLM = EngineMetrics(
    ttft="(?:trtllm[:_])?time_to_first_token_seconds",
    e2e="(?:trtllm[:_])?e2e_request_latency_seconds",
    request_tpot="(?:trtllm[:_])?time_per_output_token_seconds",
)

#: engine name (``Config.engine``) -> its metric families
ENGINES: dict[str, EngineMetrics] = {"vllm": VLLM, "sglang": SGLANG, "trtllm": TRTLLM}
