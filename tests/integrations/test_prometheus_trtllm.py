"""TensorRT-LLM ranks in the Prometheus plugin: only the families trtllm-serve exports are
queried, and what it does not export is missing, never 0.

A stub of Prometheus' query API on 127.0.0.1 records every query and answers like a
trtllm-serve replica would (request-level histograms only); the real-Prometheus test
(``test_prometheus_real.py``) scrapes fake trtllm-serve endpoints end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from koi.integrations.prometheus import ENGINES, PrometheusTelemetry
from koi.testing.fakes import example_pools
from koi.types import Chain, Config, Mediator, Outcome, Rank

from .test_prometheus_bad_input import StubPrometheus, vector

WINDOW = (1000.0, 1060.0)
RANK = Rank(Chain("Llama-3.1-8B", example_pools()[0].environment, Config(engine="trtllm")), 2)
# what trtllm-serve's series carry, and the label Prometheus adds from the scrape target
LABELS = {"model_name": "undefined", "engine_type": "undefined", "pod": "chat-trtllm"}


def trtllm(query: str) -> tuple[int, Any, float]:
    """Two trtllm-serve replicas of the rank: 10 requests/s over the window."""
    if "_bucket" in query:
        rates = [("0.1", "2"), ("0.25", "9"), ("0.5", "9.9"), ("+Inf", "10")]
        return 200, vector(*[({**LABELS, "le": le}, v) for le, v in rates]), 0
    if query.startswith("group"):
        up = [({**LABELS, "instance": a}, "1") for a in ("10.0.0.1:8000", "10.0.0.2:8000")]
        return 200, vector(*up), 0
    return 200, vector(), 0  # trtllm-serve has nothing else


@pytest.fixture
def stub() -> Iterator[StubPrometheus]:
    s = StubPrometheus()
    s.answer = trtllm
    yield s
    s.stop()


def test_trtllm_queries_only_the_families_it_exports(stub: StubPrometheus) -> None:
    plugin = PrometheusTelemetry(
        stub.url, rules=[{"engine": "trtllm", "labels": {"pod": "{job}-trtllm"}}]
    )
    (window,) = plugin.read([("chat", RANK)], WINDOW)
    names = " ".join(stub.queries)
    for family in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):
        assert f'__name__=~"(?:trtllm[:_])?{family}_bucket"' in names
    assert '__name__=~"(?:trtllm[:_])?time_per_output_token_seconds_bucket"' in names
    # Not exported by trtllm-serve, so never asked for.
    for absent in (
        "generation_tokens",
        "kv_cache",
        "num_requests",
        "running",
        "waiting",
        "inter_token",
        "preemption",
        "prefix",
    ):
        assert absent not in names, absent
    assert not any("avg_over_time" in q for q in stub.queries)  # no gauge at all
    # ttft, e2e, request TPOT (p99 and per replica), and who is up
    assert len(stub.queries) == 5
    (up,) = [q for q in stub.queries if q.startswith("group")]
    assert '__name__=~"(?:trtllm[:_])?time_to_first_token_seconds_count"' in up
    assert window.throughput_tok_s is None
    assert window.kv_cache_util is window.running is window.waiting is None
    assert window.tpot is not None
    assert window.tpot[0] == "request_tpot"  # per request, as koi's TPOT means


def test_trtllm_mediators_it_does_not_export_are_missing_not_zero(stub: StubPrometheus) -> None:
    plugin = PrometheusTelemetry(
        stub.url, rules=[{"engine": "trtllm", "labels": {"pod": "{job}-trtllm"}}]
    )
    (o,) = plugin.koi_collect_telemetry([("chat", RANK)], WINDOW)
    assert o.requests == 600
    assert o.completed == 600
    assert o.replicas_up == 2
    assert o.healthy
    assert o.measured(Outcome.TTFT) == pytest.approx(500.0)
    assert o.measured(Outcome.TPOT) == pytest.approx(500.0)
    for variable in (
        Mediator.KV_CACHE_UTIL,
        Mediator.MEAN_BATCH,
        Mediator.QUEUE_DEPTH,
        Mediator.PREEMPTION_RATE,
        Mediator.PREFIX_HIT_RATE,
        Outcome.THROUGHPUT,
        Outcome.COST,
    ):
        assert variable.value in o.missing
        assert o.measured(variable) is None


def test_the_trtllm_family_is_request_level_only() -> None:
    m = ENGINES["trtllm"]
    assert m.itl is m.generation_tokens is m.kv_cache is m.running is m.waiting is None
    assert m.preemptions is m.prefix_hits is m.prefix_queries is m.prefix_hit_rate is None
    assert len(m.names()) == 3
