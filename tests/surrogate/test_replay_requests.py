"""Request sampling and the step-time cache of the replay engine."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.errors import InvalidInput
from koi.surrogate.replay import (
    CachedStepModel,
    Request,
    StepTime,
    batch_requests,
    sample_lengths,
    sample_requests,
)
from koi.types import Arrival, LengthDist, WorkloadProfile


def profile(arrival: Arrival, rate: float = 20.0, gamma_cv: float = 1.0) -> WorkloadProfile:
    return WorkloadProfile(
        input_len=LengthDist(800, 1.0, 6000),
        output_len=LengthDist(150, 0.3, 1000),
        arrival=arrival,
        rate_rps=rate,
        gamma_cv=gamma_cv,
    )


def gaps(reqs: list[Request]) -> np.ndarray:
    return np.diff([r.arrival_s for r in reqs])


def test_poisson_arrivals_have_the_rate_and_unit_cv() -> None:
    reqs = sample_requests(profile(Arrival.POISSON), np.random.default_rng(0), 10.0, 1010.0)
    assert len(reqs) == pytest.approx(20_000, abs=5 * np.sqrt(20_000))
    g = gaps(reqs)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.05)
    assert all(10.0 <= r.arrival_s < 1010.0 for r in reqs)
    assert [r.id for r in reqs] == list(range(len(reqs)))


def test_constant_arrivals_are_evenly_spaced() -> None:
    reqs = sample_requests(profile(Arrival.CONSTANT, rate=4.0), np.random.default_rng(0), 0, 10)
    assert len(reqs) == 39  # 0.25, 0.5, ..., 9.75
    np.testing.assert_allclose(gaps(reqs), 0.25)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_arrivals_have_the_requested_cv(cv: float) -> None:
    reqs = sample_requests(
        profile(Arrival.GAMMA, gamma_cv=cv), np.random.default_rng(1), 0.0, 3000.0
    )
    g = gaps(reqs)
    assert g.mean() == pytest.approx(1 / 20.0, rel=0.08)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.1)


def test_lengths_follow_the_distribution_and_stay_in_range() -> None:
    rng = np.random.default_rng(2)
    x = sample_lengths(LengthDist(300, 0.8, 100_000), rng, 200_000)
    assert x.mean() == pytest.approx(300, rel=0.02)
    assert x.std() / x.mean() == pytest.approx(0.8, rel=0.05)
    y = sample_lengths(LengthDist(300, 2.0, 900), rng, 10_000)
    assert y.min() >= 1
    assert y.max() == 900
    assert set(sample_lengths(LengthDist(37.4, 0.0, 100), rng, 5).tolist()) == {37}


@given(seed=st.integers(0, 2**32 - 1), end=st.floats(0.0, 50.0))
def test_sampling_is_deterministic_for_a_seed(seed: int, end: float) -> None:
    a = sample_requests(profile(Arrival.GAMMA), np.random.default_rng(seed), 0.0, end, id_start=9)
    b = sample_requests(profile(Arrival.GAMMA), np.random.default_rng(seed), 0.0, end, id_start=9)
    assert a == b
    assert all(1 <= r.input_tokens <= 6000 and 1 <= r.output_tokens <= 1000 for r in a)


def test_rate_scale_multiplies_the_rate() -> None:
    rng = np.random.default_rng(3)
    base = sample_requests(profile(Arrival.CONSTANT), rng, 0.0, 100.0)
    double = sample_requests(profile(Arrival.CONSTANT), rng, 0.0, 100.0, rate_scale=2.0)
    assert len(double) == 2 * len(base) + 1


def test_batch_requests_and_bad_inputs() -> None:
    reqs = batch_requests(profile(Arrival.POISSON), np.random.default_rng(0), 5, arrival_s=3.0)
    assert [r.arrival_s for r in reqs] == [3.0] * 5
    batch = WorkloadProfile(input_len=LengthDist(10), output_len=LengthDist(10), total_requests=100)
    with pytest.raises(InvalidInput, match="rate_rps"):
        sample_requests(batch, np.random.default_rng(0), 0.0, 1.0)
    with pytest.raises(InvalidInput, match="end_s"):
        sample_requests(profile(Arrival.POISSON), np.random.default_rng(0), 2.0, 1.0)
    with pytest.raises(InvalidInput, match="rate_scale"):
        sample_requests(profile(Arrival.POISSON), np.random.default_rng(0), 0, 1, rate_scale=0)
    with pytest.raises(InvalidInput, match="n"):
        batch_requests(batch, np.random.default_rng(0), -1)


@attrs.define
class Counting:
    calls: int = 0

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        self.calls += 1
        return StepTime(
            compute_s=1e-3 + 1e-5 * prefill_tokens + 1e-9 * prefill_pairs,
            memory_s=1e-3 + 1e-7 * decode_context_tokens + 1e-6 * decode_seqs,
        )


def exact(model: Counting | Curved, t: int, p: float, n: int, c: float) -> float:
    return model.step(
        prefill_tokens=t, prefill_pairs=p, decode_seqs=n, decode_context_tokens=round(c)
    ).time_s


def test_affine_cache_is_exact_for_decode_and_affine_models() -> None:
    model = Counting()
    cached = CachedStepModel(model)
    for c in (0.0, 1_000.0, 55_555.0, 1e6):
        assert cached.decode(8, c)[0] == pytest.approx(exact(model, 0, 0, 8, c), rel=1e-12)
    assert model.calls == 3 + 4  # one node (three probes) plus the four reference calls
    # The model is affine in every input, so interpolating between nodes is exact too.
    for t, p, n, c in ((37, 900.0, 0, 0.0), (1_234, 5e5, 77, 9e4), (8_000, 3.2e7, 250, 2e5)):
        assert cached.mixed(t, p, n, c)[0] == pytest.approx(exact(model, t, p, n, c), rel=1e-9)
    assert len(cached) > 1


@attrs.frozen
class Curved:
    """Not affine in tokens or sequences (GEMM efficiency ramp, expert routing)."""

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        tokens = prefill_tokens + decode_seqs
        return StepTime(
            compute_s=2e-5 * tokens * (tokens + 200) / (tokens + 50) + 1e-10 * prefill_pairs,
            memory_s=4e-3 * (1 - 0.9**tokens) + 1e-8 * decode_context_tokens,
            comm_s=1e-6 * tokens**0.8,
            overhead_s=1e-3,
        )


@given(
    t=st.integers(1, 16_384),
    offset=st.integers(0, 30_000),
    n=st.integers(0, 512),
    c=st.floats(0.0, 1e6),
)
def test_affine_cache_interpolates_curved_models_within_a_percent(
    t: int, offset: int, n: int, c: float
) -> None:
    model = Curved()
    cached = CachedStepModel(model, resolution=0.05)
    p = t * (offset + t / 2)
    assert cached.mixed(t, p, n, c)[0] == pytest.approx(exact(model, t, p, n, c), rel=0.01)


def test_cache_against_the_operator_model() -> None:
    surrogate = pytest.importorskip("koi.surrogate")
    catalog = pytest.importorskip("koi.catalog").load_catalog()
    from koi.types import Config

    rng = np.random.default_rng(0)
    worst = 0.0
    for gpu, name, config in (
        ("H100-SXM", "Llama-3.1-8B", Config()),
        ("L40S", "Mixtral-8x7B", Config(tp=4)),
        ("A100-80GB", "Llama-3.1-70B", Config(tp=4, pp=2)),
    ):
        model = surrogate.OperatorModel(catalog.gpus[gpu], catalog.models[name], config)
        cached = CachedStepModel(model)
        for _ in range(60):
            t = int(rng.integers(0, 8_192))
            n = int(rng.integers(1 if t == 0 else 0, 256))
            p = t * (float(rng.integers(0, 8_000)) + t / 2)
            c = float(n * rng.integers(1, 8_000))
            got = cached.mixed(t, p, n, c)[0]
            worst = max(worst, abs(got / exact(model, t, p, n, c) - 1))
    assert worst < 0.02


def test_bucket_cache_evaluates_the_model_once_per_bucket() -> None:
    model = Counting()
    cached = CachedStepModel(model, resolution=0.02, floor_tokens=64, affine=False)
    a = cached.decode(8, 10_000)
    b = cached.decode(8, 9_950)  # same 2 % bucket
    c = cached.decode(8, 10_400)  # next bucket
    assert a == b != c
    assert model.calls == 2
    assert a[0] == pytest.approx(exact(model, 0, 0, 8, 10_000), rel=0.01)
    x = cached.mixed(512, 512 * 256.0, 3, 999)
    assert x == cached.mixed(512, 512 * 257.0, 3, 1_002)
    assert model.calls == 4  # two decode buckets, the reference call above, one mixed bucket
    assert len(cached) == 3
    assert cached.step(
        prefill_tokens=512, prefill_pairs=512 * 256.0, decode_seqs=3, decode_context_tokens=999
    ).time_s == pytest.approx(x[0])


def test_cache_rejects_bad_settings_and_zero_time_steps() -> None:
    with pytest.raises(InvalidInput, match="resolution"):
        CachedStepModel(Counting(), resolution=0.0)
    with pytest.raises(InvalidInput, match="floor_tokens"):
        CachedStepModel(Counting(), floor_tokens=0.0)
