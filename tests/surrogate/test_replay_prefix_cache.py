"""The replay engine's prefix cache: hits, LRU eviction under KV pressure, cache-aware routing."""

from __future__ import annotations

import numpy as np
import pytest

from koi.catalog import load_catalog
from koi.surrogate import OperatorModel, feasibility
from koi.surrogate.replay import ReplayEngine, ReplicaSpec, Request, WindowStats
from koi.surrogate.replay._prefix_cache import PrefixCache
from koi.types import Config, Routing

CAT = load_catalog()
GPU, MODEL = CAT.gpus["L40S"], CAT.models["Llama-3.1-8B"]
STEP = OperatorModel(GPU, MODEL, Config())
KV = feasibility(GPU, MODEL, Config()).kv_capacity_tokens


def run(
    *,
    cache: bool,
    routing: Routing = Routing.LEAST_LOADED,
    prefixes: int = 8,
    kv: int = KV,
    replicas: int = 2,
    rate: float = 8.0,
    n: int = 1500,
) -> WindowStats:
    rng = np.random.default_rng(1)
    spec = ReplicaSpec(STEP, kv, 256, 8192, prefix_cache=cache)
    engine = ReplayEngine([spec] * replicas, routing)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    ids = rng.integers(0, prefixes, n)
    engine.submit(
        Request(i, float(t), 3000, 100, int(p), 2500)
        for i, (t, p) in enumerate(zip(arrivals, ids, strict=True))
    )
    return engine.advance(float(arrivals[-1]) + 120.0)


def test_cached_prefixes_skip_their_prefill() -> None:
    off, on = run(cache=False), run(cache=True)
    assert off.prefix_hit_rate == 0.0
    assert off.prefix_query_tokens == 0
    # 2,496 of 3,000 prompt tokens (whole 16-token blocks) once each prefix is cached.
    assert 0.75 < on.prefix_hit_rate <= 2496 / 3000
    assert on.finished == off.finished
    assert on.p99(on.ttft_ms) < 0.5 * off.p99(off.ttft_ms)


def test_kv_pressure_evicts_prefixes_and_lowers_the_hit_rate() -> None:
    roomy = run(cache=True, prefixes=40)
    tight = run(cache=True, prefixes=40, kv=40_000)
    assert tight.prefix_hit_rate < roomy.prefix_hit_rate - 0.2


def test_prefix_affinity_routing_keeps_prefixes_where_they_are_cached() -> None:
    # 60 prefixes of 2,500 tokens do not fit one replica's cache; split over 4 they do.
    common = {"cache": True, "prefixes": 60, "kv": 60_000, "replicas": 4, "rate": 6.0}
    rr = run(routing=Routing.ROUND_ROBIN, **common)  # type: ignore[arg-type]
    aff = run(routing=Routing.PREFIX_AFFINITY, **common)  # type: ignore[arg-type]
    assert aff.prefix_hit_rate > rr.prefix_hit_rate + 0.2
    assert aff.p99(aff.ttft_ms) < rr.p99(rr.ttft_ms)


def test_closed_loop_requests_keep_their_prefix() -> None:
    spec = ReplicaSpec(STEP, KV, 64, 8192, prefix_cache=True)
    engine = ReplayEngine([spec], Routing.LEAST_LOADED)
    engine.feed((Request(i, 0.0, 3000, 50, 0, 2500) for i in range(200)), 16)
    stats = engine.advance(600.0)
    assert stats.finished == 200
    assert stats.prefix_hit_rate > 0.75


def test_prefix_cache_pins_in_use_prefixes_and_evicts_idle_ones_lru() -> None:
    pc = PrefixCache(16)
    assert pc.aligned(2010, 3000) == 2000
    assert pc.aligned(2010, 1000) == 992  # never the whole prompt: 999 tokens, 62 blocks
    assert pc.acquire(1, 100) == 100  # newly pinned
    assert pc.acquire(1, 100) == 0  # shared
    assert pc.acquire(2, 50) == 50
    assert pc.release(1) == 0  # still used once
    assert pc.release(1) == 100  # idle now
    assert pc.release(2) == 50
    assert pc.holds(1)
    assert pc.holds(2)
    pc.acquire(1, 100)  # used again: no longer idle, 2 is the least recently used
    pc.release(1)
    pc.trim(120)
    assert not pc.holds(2)
    assert pc.holds(1)
    pc.trim(0)
    assert not pc.holds(1)
    assert pc.idle_tokens == 0


@pytest.mark.parametrize("routing", list(Routing))
def test_requests_without_a_prefix_are_untouched_by_the_cache(routing: Routing) -> None:
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(0.25, 300)).tolist()
    results = []
    for cache in (False, True):
        spec = ReplicaSpec(STEP, KV, 256, 8192, prefix_cache=cache)
        engine = ReplayEngine([spec, spec], routing)
        engine.submit(Request(i, t, 1000, 50) for i, t in enumerate(arrivals))
        results.append(engine.advance(arrivals[-1] + 60.0))
    off, on = results
    assert on.prefix_hit_tokens == 0
    assert list(on.ttft_ms) == list(off.ttft_ms)
