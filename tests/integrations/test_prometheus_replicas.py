"""Per-replica TPOT from a real Prometheus: two vLLM replicas of one rank, one slow.

Prometheus (Debian's package, on 127.0.0.1) scrapes two fake vLLM endpoints that carry the same
rank label, each its own ``instance``.  One serves every token 2.5 times as slowly; the plugin
must report each replica's median TPOT within the bucket it fell in, and the observation must
name the slow replica as slow.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from koi.integrations.prometheus import EngineWindow, PrometheusTelemetry
from koi.testing.fakes import example_pools
from koi.types import Chain, Config, Rank

from ._engines import TPOT_BUCKETS, FakeEngine
from ._prometheus import running_prometheus

pytestmark = pytest.mark.slow

N = 400  # requests per replica


def _bucket(x: float) -> tuple[float, float]:
    """The TPOT bucket (seconds) ``x`` falls in."""
    edges = (0.0, *TPOT_BUCKETS)
    k = next(i for i, e in enumerate(edges) if e >= x)
    return edges[k - 1], edges[k]


def test_each_replica_reports_its_median_tpot_and_the_slow_one_is_named(
    tmp_path: Path,
) -> None:
    model = "meta-llama/Llama-3.1-8B-Instruct"
    engines = {"fast": FakeEngine("vllm:", model), "slow": FakeEngine("vllm:", model)}
    rng = np.random.default_rng(0)
    tpots = {
        "fast": rng.lognormal(math.log(0.03), 0.2, N),
        "slow": rng.lognormal(math.log(0.075), 0.2, N),
    }
    targets = [{"targets": [e.target for e in engines.values()], "labels": {"koi_rank": "chat"}}]
    rank = Rank(Chain("Llama-3.1-8B", example_pools()[0].environment, Config()), 2)
    start = time.time()
    try:
        with running_prometheus(tmp_path, targets) as prom:
            count = '{__name__=~"vllm[:_]time_to_first_token_seconds_count"}'
            prom.wait_for(count, lambda r: len(r) == 2)  # both scraped at zero
            for name, engine in engines.items():
                ones = np.full(N, 0.2)
                engine.serve(
                    ttft=ones, itl=tpots[name], e2e=ones, request_tpot=tpots[name], tokens=N
                )
            prom.wait_for(
                count, lambda r: len(r) == 2 and all(float(x["value"][1]) == N for x in r)
            )
            time.sleep(1.2)  # one more scrape, well inside the window
            span = (start, time.time())

            def read(least: int) -> EngineWindow:
                rules = [{"labels": {"koi_rank": "chat"}}]
                plugin = PrometheusTelemetry(prom.url, rules=rules, min_replica_requests=least)
                (window,) = plugin.read([("chat", rank)], span)
                return window

            window, too_few = read(N // 2), read(2 * N)
    finally:
        for e in engines.values():
            e.stop()
    measured = dict(window.replica_tpot_ms)
    by_name = {name: f"127.0.0.1:{e.port}" for name, e in engines.items()}
    assert set(measured) == set(by_name.values())
    for name, instance in by_name.items():
        low, high = _bucket(float(np.median(tpots[name])))
        assert 1000 * low <= measured[instance] <= 1000 * high
    obs = window.observation()
    assert obs is not None
    assert obs.slow_replicas(1.5) == {by_name["slow"]}
    assert too_few.replica_tpot_ms == ()  # fewer requests than asked for: not reported
