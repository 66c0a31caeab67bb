"""The Prometheus plugin against a real Prometheus scraping fake vLLM / SGLang / TensorRT-LLM
endpoints.

Five engine replicas serve latencies the test draws itself: vLLM with ``vllm:`` names, vLLM
with ``vllm_`` names (and no KV-cache gauge), SGLang, and TensorRT-LLM's trtllm-serve with
``trtllm_`` names and without a prefix (its first releases), which exports request-level
histograms only.  Prometheus (Debian's package, on 127.0.0.1, scraping every second) stores
them; the plugin must give back the known p99s within the resolution of the bucket each fell
in, exactly what Prometheus' own ``histogram_quantile`` answers, and report what an engine does
not export as missing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from koi.integrations.prometheus import EngineWindow, PrometheusTelemetry, histogram_quantile
from koi.testing.contracts import TelemetryContract
from koi.testing.fakes import example_pools
from koi.types import Chain, Config, Rank

from ._engines import TPOT_BUCKETS, TTFT_BUCKETS, FakeEngine
from ._prometheus import PrometheusServer, running_prometheus

pytestmark = pytest.mark.slow

MODEL = "Llama-3.1-8B"
N = 500  # requests per engine


def _latencies(seed: int, scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "ttft": rng.lognormal(math.log(0.25 * scale), 0.6, N),
        "itl": rng.lognormal(math.log(0.03 * scale), 0.5, 10 * N),
        "request_tpot": rng.lognormal(math.log(0.035 * scale), 0.25, N),
        "e2e": rng.lognormal(math.log(6.0 * scale), 0.5, N),
    }


def _rank(pool: int, engine: str) -> Rank:
    return Rank(Chain(MODEL, example_pools()[pool].environment, Config(engine=engine)), 1)


#: the histograms each fake engine exports (koi's names)
FAMILIES = {
    "vllm-colon": ("ttft", "itl", "e2e", "request_tpot"),
    "vllm-underscore": ("ttft", "itl", "e2e", "request_tpot"),
    "sglang": ("ttft", "itl", "e2e"),
    "trtllm": ("ttft", "e2e", "request_tpot"),
    "trtllm-bare": ("ttft", "e2e", "request_tpot"),
}
TRTLLM = ("trtllm", "trtllm-bare")
# every engine's TTFT histogram, under each of its spellings
TTFT = "((vllm|sglang)[:_]|trtllm_)?time_to_first_token_seconds"


class Fleet:
    """Prometheus plus five engines, with the known samples and the window they cover."""

    def __init__(self, prom: PrometheusServer, engines: dict[str, FakeEngine]) -> None:
        self.prom = prom
        self.engines = engines
        self.samples = {name: _latencies(k, 1.0 + 0.5 * k) for k, name in enumerate(engines)}
        self.tokens = {name: 40_000 + 1_000 * k for k, name in enumerate(engines)}
        self.start = 0.0
        self.end = 0.0
        self.ranks = {
            "vllm-colon": ("chat", _rank(0, "vllm")),
            "vllm-underscore": ("chat", _rank(1, "vllm")),
            "sglang": ("summarize", _rank(2, "sglang")),
            "trtllm": ("chat", _rank(0, "trtllm")),
            "trtllm-bare": ("summarize", _rank(2, "trtllm")),
        }

    def plugin(self, **kw: Any) -> PrometheusTelemetry:
        # trtllm-serve labels its series model_name="undefined": the scrape target's labels tell
        # the ranks apart, by pool and engine.
        rules = [
            {
                "pool": r.chain.environment.id,
                "engine": r.chain.config.engine,
                "labels": {"koi_rank": name},
            }
            for name, (_, r) in self.ranks.items()
        ]
        return PrometheusTelemetry(self.prom.url, rules=rules, timeout_s=5.0, **kw)

    @property
    def deployed(self) -> list[tuple[str, Rank]]:
        return list(self.ranks.values())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    engines = {
        "vllm-colon": FakeEngine("vllm:", "meta-llama/Llama-3.1-8B-Instruct", kv_cache=0.42),
        "vllm-underscore": FakeEngine("vllm_", "meta-llama/Llama-3.1-8B-Instruct", kv_cache=None),
        "sglang": FakeEngine("sglang:", "meta-llama/Llama-3.1-8B-Instruct", kv_cache=0.7),
        "trtllm": FakeEngine("trtllm_", "meta-llama/Llama-3.1-8B-Instruct"),
        "trtllm-bare": FakeEngine("", "meta-llama/Llama-3.1-8B-Instruct"),
    }
    targets = [{"targets": [e.target], "labels": {"koi_rank": n}} for n, e in engines.items()]
    workdir = Path(tmp_path_factory.mktemp("prometheus"))
    start = time.time()  # before the first scrape: every counter starts at 0 inside the window
    try:
        with running_prometheus(workdir, targets) as prom:
            f = Fleet(prom, engines)
            f.start = start
            count = f'{{__name__=~"{TTFT}_count"}}'
            prom.wait_for(count, lambda r: len(r) == 5)  # scraped at zero
            for name, engine in engines.items():
                s = f.samples[name]
                engine.serve(
                    ttft=s["ttft"],
                    itl=s["itl"],
                    e2e=s["e2e"],
                    request_tpot=s["request_tpot"],
                    tokens=f.tokens[name],
                )
            prom.wait_for(
                count, lambda r: len(r) == 5 and all(float(x["value"][1]) == N for x in r)
            )
            time.sleep(1.2)  # one more scrape, so the last sample is well inside the window
            f.end = time.time()
            yield f
    finally:
        for e in engines.values():
            e.stop()


def _window(fleet: Fleet, name: str) -> EngineWindow:
    plugin = fleet.plugin()
    windows = plugin.read([fleet.ranks[name]], (fleet.start, fleet.end))
    assert len(windows) == 1, plugin.last_notes
    return windows[0]


def _ranked(samples: np.ndarray, q: float) -> tuple[float, float]:
    """The observations histogram_quantile's rank may point at.

    The rank is q·count on rate()-extrapolated counts.  When q·n is a whole number k, the rank
    equals the cumulative count of the bucket holding the k-th smallest observation, and float
    rounding in the extrapolation decides whether Prometheus answers that bucket or the next,
    which holds the (k+1)-th: both are right.
    """
    ordered = np.sort(samples)
    k = math.ceil(q * len(samples))
    tie = math.isclose(q * len(samples), k) and k < len(samples)
    return float(ordered[k - 1]), float(ordered[k] if tie else ordered[k - 1])


def _in_bucket(low: float, high: float, samples: np.ndarray, q: float) -> bool:
    first, last = _ranked(samples, q)
    return low <= last and first <= high


@pytest.mark.parametrize(
    ("name", "family"), [(name, family) for name, fams in FAMILIES.items() for family in fams]
)
def test_p99_and_p50_equal_the_known_values_within_the_bucket(
    fleet: Fleet, name: str, family: str
) -> None:
    w = _window(fleet, name)
    samples = fleet.samples[name][family] * 1000.0
    for q in (0.5, 0.99):
        est = w.latency_ms[f"p{round(q * 100)}_{family}"]
        assert _in_bucket(est.low, est.high, samples, q), (q, est, _ranked(samples, q))
        exact = float(np.quantile(samples, q))
        assert abs(est.value - exact) <= est.high - est.low  # within the bucket's resolution


@pytest.mark.parametrize("name", list(FAMILIES))
def test_quantiles_are_prometheus_own_histogram_quantile(fleet: Fleet, name: str) -> None:
    w = _window(fleet, name)
    span = f"{round((fleet.end - fleet.start) * 1000)}ms"
    ttft = '{__name__=~"' + TTFT + '_bucket", koi_rank="%s"}'
    promql = f"histogram_quantile(0.99, sum by (le) (rate({ttft % name}[{span}])))"
    (answer,) = fleet.prom.query(promql, at=fleet.end)
    assert w.latency_ms["p99_ttft"].value == pytest.approx(float(answer["value"][1]) * 1000)


def test_the_bucket_is_the_one_the_known_counts_give(fleet: Fleet) -> None:
    samples = fleet.samples["vllm-colon"]["ttft"]
    counts = [(le, float((samples <= le).sum())) for le in TTFT_BUCKETS] + [(math.inf, N)]
    expected = histogram_quantile(0.99, counts)
    assert expected is not None
    got = _window(fleet, "vllm-colon").latency_ms["p99_ttft"]
    assert got.value == pytest.approx(expected.value * 1000)
    assert (got.low, got.high) == pytest.approx((expected.low * 1000, expected.high * 1000))


def test_observation_carries_p99s_their_resolution_and_what_is_missing(fleet: Fleet) -> None:
    plugin = fleet.plugin()
    obs = {
        o.chain: o for o in plugin.koi_collect_telemetry(fleet.deployed, (fleet.start, fleet.end))
    }
    assert len(obs) == 5
    for name, (_, rank) in fleet.ranks.items():
        o = obs[rank.chain]
        s = fleet.samples[name]
        ttft = o.bounds("p99_ttft_ms")
        assert ttft is not None
        assert _in_bucket(ttft.low, ttft.high, s["ttft"] * 1000, 0.99)
        assert o.outcomes.p99_ttft_ms == pytest.approx(
            _window(fleet, name).latency_ms["p99_ttft"].value
        )
        # koi's TPOT is per request: vLLM and TensorRT-LLM export it; SGLang only has the
        # inter-token latency.
        tpot_family = "itl" if name == "sglang" else "request_tpot"
        tpot = o.bounds("p99_tpot_ms")
        assert tpot is not None
        assert _in_bucket(tpot.low, tpot.high, s[tpot_family] * 1000, 0.99)
        # rate() extrapolates past the samples, more so when scrapes run late on a busy host.
        assert N <= o.requests <= 2.0 * N
        assert o.replicas_up == 1
        if name in TRTLLM:
            # No token counter, KV-cache, running or waiting gauge: missing, never 0.
            for variable in (
                "throughput_tok_s",
                "cost_per_mtok_usd",
                "kv_cache_util",
                "mean_batch_size",
                "queue_depth",
                "preemption_rate",
                "prefix_hit_rate",
            ):
                assert o.measured(variable) is None, (name, variable)
                assert variable in o.missing
            assert o.measured("p99_ttft_ms") is not None
            assert o.measured("p99_tpot_ms") is not None
            assert o.healthy
            continue
        tokens = fleet.tokens[name]
        span = fleet.end - fleet.start
        assert tokens <= o.outcomes.throughput_tok_s * span <= 2.0 * tokens
        assert o.mediators.mean_batch_size == pytest.approx(8.0)
        assert o.mediators.queue_depth == pytest.approx(2.0)
        assert o.healthy
        assert "slo_margin" in o.missing
        assert "comm_share" in o.missing
    colon, under, sglang = (
        obs[fleet.ranks[n][1].chain] for n in ("vllm-colon", "vllm-underscore", "sglang")
    )
    assert colon.measured("kv_cache_util") == pytest.approx(0.42)
    assert sglang.measured("kv_cache_util") == pytest.approx(0.7)
    assert under.measured("kv_cache_util") is None  # not exported: missing, never 0
    assert "kv_cache_util" in under.missing
    assert colon.measured("preemption_rate") is None  # no preemption counter exported


def test_tpot_falls_in_a_bucket_of_the_engine_layout(fleet: Fleet) -> None:
    o = next(
        iter(fleet.plugin().koi_collect_telemetry(fleet.deployed[:1], (fleet.start, fleet.end)))
    )
    b = o.bounds("p99_tpot_ms")
    assert b is not None
    assert b.high / 1000 in TPOT_BUCKETS


def test_a_window_with_no_scrapes_gives_no_observation(fleet: Fleet) -> None:
    plugin = fleet.plugin()
    assert list(plugin.koi_collect_telemetry(fleet.deployed, (1.0, 2.0))) == []


def test_selector_and_unmatched_labels_leave_ranks_unobserved(fleet: Fleet) -> None:
    plugin = fleet.plugin(selector='koi_rank="nobody"')
    assert list(plugin.koi_collect_telemetry(fleet.deployed, (fleet.start, fleet.end))) == []


class TestPrometheusContract(TelemetryContract):
    """koi.testing's telemetry contract, against the real Prometheus."""

    @pytest.fixture
    def telemetry_source(self, fleet: Fleet) -> object:
        return fleet.plugin()

    @pytest.fixture
    def deployed(self, fleet: Fleet) -> tuple[Sequence[tuple[str, Rank]], tuple[float, float]]:
        return fleet.deployed, (fleet.start, fleet.end)
