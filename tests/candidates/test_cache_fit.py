"""A batch capped to what the KV cache holds whole: screened for online jobs' long prompts on
engines that admit a prompt by its first slice, where an uncapped batch lets long prompts evict
each other."""

from __future__ import annotations

import math

import attrs
import pytest
from tests._support.specs import H100_NODE, summary_job

from koi.candidates import ProposerConfig, Screener
from koi.catalog import load_catalog
from koi.errors import KoiError
from koi.surrogate import Surrogate
from koi.types import Chain, Config, Engine, Job, LengthDist, Quant, ServingTarget, WorkloadProfile

_CATALOG = load_catalog()
_SUMMARIES = summary_job(1.0)
_CHAT = attrs.evolve(
    _SUMMARIES,
    workload=WorkloadProfile(
        LengthDist(1_200, 0.5, 8_000), LengthDist(250, 0.5, 2_000), rate_rps=1.0
    ),
)


def _screener(cfg: ProposerConfig | None = None) -> Screener:
    return Screener(Surrogate(dict(_CATALOG.gpus), dict(_CATALOG.models)), cfg)


def _options(screener: Screener, job: Job) -> dict[tuple[int, Quant, int], float]:
    gpu = _CATALOG.gpus[H100_NODE.gpu]
    opts = screener._screen_shape(job, H100_NODE, gpu, math.inf)
    assert opts is not None
    return {(o.config.tp, o.config.quant, o.config.max_batch_size): o.capacity_tok_s for o in opts}


def test_long_prompts_are_also_screened_with_a_batch_the_cache_holds() -> None:
    """Qwen3-32B FP8 on one H100 holds about seven 20K-token requests: the cap is four fifths
    of them, and the capped replica's capacity is its saturation, not the far lower stable rate
    of an uncapped one."""
    screener = _screener()
    fe = screener.surrogate.feasibility(Chain("Qwen3-32B", H100_NODE, Config(quant=Quant.FP8)))
    cap = math.floor(0.8 * fe.kv_capacity_tokens / (20_000 + 500))
    assert 1 <= cap < 64
    options = _options(screener, _SUMMARIES)
    assert options[(1, Quant.FP8, cap)] > 2.0 * options[(1, Quant.FP8, 64)]
    # One cap per (tp, precision), none where the cache holds more than the smallest batch.
    batches = {b for (tp, q, b) in options if (tp, q) == (1, Quant.FP8)}
    assert batches == {cap, 64, 256}
    assert all(b in (64, 256) for (tp, _, b) in options if tp == 8)


def test_the_share_sets_the_cap_and_zero_screens_none() -> None:
    fe = _screener().surrogate.feasibility(Chain("Qwen3-32B", H100_NODE, Config(quant=Quant.FP8)))
    cap = math.floor(0.5 * fe.kv_capacity_tokens / (20_000 + 500))
    half = _options(_screener(ProposerConfig(cache_fit_share=0.5)), _SUMMARIES)
    assert (1, Quant.FP8, cap) in half
    none = _options(_screener(ProposerConfig(cache_fit_share=0.0)), _SUMMARIES)
    assert {b for (_, _, b) in none} == {64, 256}
    with pytest.raises(KoiError, match="cache_fit_share"):
        ProposerConfig(cache_fit_share=1.5)


def test_a_batch_job_gets_no_cap() -> None:
    """A batch job's closed loop keeps as many requests in flight as the batch allows: an
    uncapped one pays a bounded recompute tax (the closed form charges it) instead of
    collapsing, and a cap would only cost throughput where the engine admits fewer."""
    w = WorkloadProfile(
        _SUMMARIES.workload.input_len, _SUMMARIES.workload.output_len, total_requests=2_000
    )
    job = Job("digest", "Qwen3-32B", "batch", w, ServingTarget.batch(deadline_s=3_600))
    assert {b for (_, _, b) in _options(_screener(), job)} == {64, 256}


def test_prompts_admitted_whole_get_no_cap() -> None:
    """Prompts no longer than one slice are admitted whole: nothing to cap."""
    assert {b for (_, _, b) in _options(_screener(), _CHAT)} == {64, 256}


def test_an_engine_that_admits_whole_prompts_gets_no_cap() -> None:
    screener = _screener()
    for engine in (Engine.SGLANG, Engine.TRTLLM):
        config = Config(engine=engine, quant=Quant.FP8)
        assert screener._cache_fit(_SUMMARIES, config, 150_000) is None
    assert screener._cache_fit(_SUMMARIES, Config(chunked_prefill=False), 150_000) is None
    assert screener._cache_fit(_SUMMARIES, Config(), 150_000) is not None


def test_the_fewest_gpus_for_long_summaries_take_the_cap() -> None:
    """The budget books' cheapest option on H100s for 20K-token summaries is a capped batch:
    the same traffic on fewer GPUs than any uncapped option."""
    job = attrs.evolve(_SUMMARIES, workload=attrs.evolve(_SUMMARIES.workload, rate_rps=0.5))
    (pick,) = _screener().fewest_gpus(job, [H100_NODE], dict(_CATALOG.gpus), now_s=0.0)
    assert pick.option.config.max_batch_size < 64
    uncapped = _screener(ProposerConfig(cache_fit_share=0.0))
    (other,) = uncapped.fewest_gpus(job, [H100_NODE], dict(_CATALOG.gpus), now_s=0.0)
    assert pick.replicas * pick.option.config.gpus < other.replicas * other.option.config.gpus
