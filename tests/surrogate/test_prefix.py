"""Prefix caching in the surrogate: the hit-rate model, routing and KV pressure (issue 23)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.catalog import Catalog, load_catalog
from koi.surrogate import RankCorrection, Surrogate, SurrogateConfig
from koi.surrogate._analytic import RankLoad
from koi.surrogate._prefix import PrefixHit, cached_load, prefix_hit, prefixes_per_replica
from koi.testing import length_dists
from koi.types import (
    MAX_CV,
    Chain,
    Config,
    Job,
    Ladder,
    LengthDist,
    Mediator,
    Rank,
    Routing,
    ServingTarget,
    WorkloadProfile,
)

L40S = ("aws", "g6e.12xlarge", "us-east-1")


def rag_job(*, tokens: int | None = 2000, prefixes: int = 300, rate: float = 6.0) -> Job:
    """A long shared system prompt (2,000 of 2,600 prompt tokens), many distinct prefixes."""
    w = WorkloadProfile(
        LengthDist(2600, 0.3, 8000),
        LengthDist(200, 0.5, 1000),
        rate_rps=rate,
        prefix_tokens=tokens,
        prefix_count=prefixes,
    )
    return Job(
        "rag", "Llama-3.1-8B", "online", w, ServingTarget.online(p99_ttft_ms=1500, p99_tpot_ms=60)
    )


def ladder(catalog: Catalog, routing: str, replicas: int = 4) -> Ladder:
    cloud, instance, region = L40S
    env = catalog.instance(cloud, instance).environment(region, "on_demand")
    return Ladder((Rank(Chain("Llama-3.1-8B", env, Config(routing=routing)), replicas),))


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def surrogate(catalog: Catalog) -> Surrogate:
    return Surrogate(catalog.gpus, catalog.models, SurrogateConfig(use_replay=False))


def test_affinity_routing_predicts_lower_ttft_and_higher_capacity(
    catalog: Catalog, surrogate: Surrogate
) -> None:
    job = rag_job()
    rr = surrogate.screen(job, ladder(catalog, "round_robin"))
    aff = surrogate.screen(job, ladder(catalog, "prefix_affinity"))
    assert aff.mediators.prefix_hit_rate > rr.mediators.prefix_hit_rate + 0.3
    assert aff.outcomes.p99_ttft_ms < 0.9 * rr.outcomes.p99_ttft_ms
    assert aff.ranks[0].capacity_tok_s > 1.5 * rr.ranks[0].capacity_tok_s
    # The replay agrees on the direction.
    replayed = Surrogate(catalog.gpus, catalog.models, SurrogateConfig(use_replay=True))
    rr_r = replayed.predict(job, ladder(catalog, "round_robin"))
    aff_r = replayed.predict(job, ladder(catalog, "prefix_affinity"))
    assert aff_r.outcomes.p99_ttft_ms < rr_r.outcomes.p99_ttft_ms


def test_a_shared_prefix_lowers_ttft_and_raises_capacity(
    catalog: Catalog, surrogate: Surrogate
) -> None:
    lad = ladder(catalog, "least_loaded")
    none = surrogate.screen(rag_job(tokens=None), lad)
    one = surrogate.screen(rag_job(prefixes=1), lad)
    assert none.mediators.prefix_hit_rate == 0.0
    assert one.mediators.prefix_hit_rate == pytest.approx(2000 / 2600, rel=0.01)
    assert one.outcomes.p99_ttft_ms < none.outcomes.p99_ttft_ms
    assert one.ranks[0].capacity_tok_s > none.ranks[0].capacity_tok_s


def test_a_prefix_that_covers_nearly_every_prompt_is_predicted(
    catalog: Catalog, surrogate: Surrogate
) -> None:
    # 2,000-token prompts with a CV of 1, 1,984 of them shared: the uncached remainder is 16
    # tokens whose spread, kept at its absolute width, would be a CV of 125 (the bound is 100).
    # The prediction failed, and the planner fell back to its safe plan every tick.
    w = WorkloadProfile(
        LengthDist(2000, 1.0, 8000),
        LengthDist(200, 0.5, 1000),
        rate_rps=2.0,
        prefix_tokens=1984,
        prefix_count=1,
    )
    job = attrs.evolve(rag_job(), workload=w)
    pred = surrogate.screen(job, ladder(catalog, "least_loaded"))
    assert pred.mediators.prefix_hit_rate == pytest.approx(1984 / 2000, rel=0.01)
    assert pred.outcomes.throughput_tok_s > 0


_CATALOG = load_catalog()
_STEP, _ = Surrogate(_CATALOG.gpus, _CATALOG.models).step_model(
    _CATALOG.gpus["L40S"], _CATALOG.models["Llama-3.1-8B"], Config()
)


@given(length_dists(max_mean=32768.0), st.floats(0.0, 1.0), st.floats(-1e6, 1e6))
def test_any_share_of_any_prompt_served_from_the_cache_leaves_a_valid_load(
    prompt: LengthDist, share: float, offset: float
) -> None:
    load = RankLoad(
        _STEP,
        kv_capacity_tokens=100_000,
        max_batch_size=256,
        max_batched_tokens=8192,
        input_len=prompt,
        output_len=LengthDist(200, 0.5, 1000),
    )
    hit = PrefixHit(share, share * prompt.mean, offset, share)
    out = cached_load(load, hit)
    assert 1.0 <= out.input_len.mean <= max(prompt.mean, 1.0)
    assert 0.0 <= out.input_len.cv <= MAX_CV
    assert 50_000 <= out.kv_capacity_tokens <= 200_000


def test_the_default_prefix_model_changes_nothing(catalog: Catalog, surrogate: Surrogate) -> None:
    # prefix_share 0 and one prefix: what every workload meant before prefix caching.
    job = rag_job(tokens=None)
    bare = attrs.evolve(
        job, workload=WorkloadProfile(job.workload.input_len, job.workload.output_len, rate_rps=6)
    )
    lad = ladder(catalog, "least_loaded")
    assert surrogate.screen(job, lad).outcomes == surrogate.screen(bare, lad).outcomes
    # ... and prefix_share alone sets the length: a quarter of the mean prompt.
    shared = attrs.evolve(job.workload, prefix_share=0.25)
    assert shared.shared_prefix_tokens == 650


def test_kv_pressure_evicts_cached_prefixes() -> None:
    w = rag_job(prefixes=64).workload
    common = {"replicas": 1, "routing": Routing.LEAST_LOADED, "block_tokens": 16}
    roomy = prefix_hit(w, kv_capacity_tokens=200_000, running=8, **common)
    busy = prefix_hit(w, kv_capacity_tokens=200_000, running=120, **common)
    small = prefix_hit(w, kv_capacity_tokens=60_000, running=8, **common)
    assert roomy.probability == 1.0
    assert busy.probability < roomy.probability
    assert small.probability < roomy.probability
    # Whole blocks only: 2000 tokens are 125 blocks of 16.
    assert roomy.cached_tokens == 2000.0
    assert prefix_hit(attrs.evolve(w, prefix_tokens=2010), kv_capacity_tokens=400_000, running=8,
                      **common).cached_tokens == 2000.0  # fmt: skip


def test_kv_pressure_lowers_the_predicted_hit_rate(catalog: Catalog, surrogate: Surrogate) -> None:
    lad = ladder(catalog, "least_loaded")
    light = surrogate.screen(rag_job(prefixes=80, rate=2.0), lad)
    heavy = surrogate.screen(rag_job(prefixes=80, rate=40.0), lad)
    assert heavy.mediators.prefix_hit_rate < light.mediators.prefix_hit_rate


def test_affinity_splits_the_prefixes_over_the_replicas() -> None:
    assert prefixes_per_replica(300, 4, Routing.PREFIX_AFFINITY) == 75
    assert prefixes_per_replica(3, 4, Routing.PREFIX_AFFINITY) == 1
    assert prefixes_per_replica(300, 4, Routing.ROUND_ROBIN) == 300
    assert prefixes_per_replica(300, 4, Routing.LEAST_LOADED) == 300


def test_the_hit_rate_correction_acts_on_the_hits(catalog: Catalog, surrogate: Surrogate) -> None:
    job, lad = rag_job(prefixes=1), ladder(catalog, "least_loaded")
    plain = surrogate.screen(job, lad)
    half = RankCorrection(mediators={Mediator.PREFIX_HIT_RATE: 0.5})
    corrected = surrogate.screen(job, lad, corrections=lambda _c: half)
    assert corrected.mediators.prefix_hit_rate == pytest.approx(
        plain.mediators.prefix_hit_rate / 2, rel=0.01
    )
    assert corrected.outcomes.p99_ttft_ms > plain.outcomes.p99_ttft_ms
    assert corrected.ranks[0].capacity_tok_s < plain.ranks[0].capacity_tok_s


def test_a_batch_job_with_a_shared_prefix_runs_faster(
    catalog: Catalog, surrogate: Surrogate
) -> None:
    w = rag_job(prefixes=1).workload
    batch = Job(
        "b",
        "Llama-3.1-8B",
        "batch",
        attrs.evolve(w, rate_rps=None, total_requests=10_000),
        ServingTarget.batch(deadline_s=3600.0),
    )
    bare = attrs.evolve(batch, workload=attrs.evolve(batch.workload, prefix_tokens=None))
    lad = ladder(catalog, "least_loaded")
    assert (
        surrogate.screen(batch, lad).outcomes.throughput_tok_s
        > surrogate.screen(bare, lad).outcomes.throughput_tok_s
    )
