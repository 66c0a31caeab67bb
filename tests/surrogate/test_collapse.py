"""A chunk-admitting replica with long prompts collapses well below its saturation: once more
requests are in it than its KV cache can finish, the admitted prompts evict each other and are
recomputed for ever.  The closed form's capacity is the rate below which that is unlikely, and
the replay (the same engine the simulated fleet runs) agrees with it."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from tests._support.specs import H100_NODE, gpus, models

from koi.surrogate import Surrogate, SurrogateConfig, feasibility, replay_horizon
from koi.surrogate import replay as engine
from koi.surrogate._analytic import RankLoad, saturation
from koi.surrogate._predict import rank_load
from koi.types import (
    Chain,
    Config,
    Job,
    Ladder,
    LengthDist,
    Quant,
    Rank,
    Routing,
    ServingTarget,
    WorkloadProfile,
)

_SUMMARY = (LengthDist(20_000, 0.3, 32_000), LengthDist(500, 0.4, 2_048))


def _load(
    tp: int,
    cfg: SurrogateConfig | None = None,
    lengths: tuple[LengthDist, LengthDist] = _SUMMARY,
) -> RankLoad:
    """Qwen3-32B in FP8 on ``tp`` H100s (vLLM: chunk admission), 20K-token summaries."""
    cfg = cfg or SurrogateConfig()
    sur = Surrogate(gpus(), models(), cfg=cfg)
    gpu, model = sur.gpus["H100-SXM"], sur.models["Qwen3-32B"]
    config = Config(tp=tp, quant=Quant.FP8)
    inp, out = lengths
    feas = feasibility(gpu, model, config, cfg=cfg, seq_tokens=int(inp.mean + out.mean))
    step, _ = sur.step_model(gpu, model, config)
    return rank_load(step, feas.kv_capacity_tokens, config, inp.max + out.max, inp, out, cfg)


def _capacity(load: RankLoad) -> float:
    return saturation(load)[1]


def _served_share(load: RankLoad, tok_s: float) -> float:
    """Output tokens one replica finishes over the replay's window, over those it was sent."""
    out = load.output_len.mean
    rate = tok_s / out
    cfg = SurrogateConfig()
    horizon = replay_horizon(rate, cfg)
    workload = WorkloadProfile(load.input_len, load.output_len, rate_rps=rate)
    spec = engine.ReplicaSpec(
        step_model=load.step_model,
        kv_capacity_tokens=load.kv_capacity_tokens,
        max_batch_size=load.max_batch_size,
        max_batched_tokens=load.max_batched_tokens,
        chunk_admission=load.chunk_admission,
    )
    eng = engine.ReplayEngine([spec], Routing.ROUND_ROBIN)
    requests = engine.sample_requests(workload, np.random.default_rng(0), 0.0, 1.2 * horizon)
    eng.submit(requests)
    eng.advance(0.2 * horizon)
    stats = eng.advance(1.2 * horizon)
    sent = sum(r.output_tokens for r in requests if 0.2 * horizon <= r.arrival_s < 1.2 * horizon)
    return stats.output_tokens_generated / sent


def test_a_tight_cache_caps_the_capacity_at_its_stable_rate() -> None:
    """One H100 holds seven and a half 20K-token requests: the stable rate is well under the
    saturation of an engine that admits only whole prompts (which never evicts)."""
    load = _load(1)
    whole = attrs.evolve(load, chunk_admission=False)
    assert _capacity(load) < 0.6 * _capacity(whole)


def test_the_replay_holds_below_the_stable_rate_and_collapses_above_it() -> None:
    load = _load(1)
    stable = _capacity(load)
    saturated = _capacity(attrs.evolve(load, chunk_admission=False))
    assert _served_share(load, 0.8 * stable) > 0.9
    # Still short of saturation, but past the stable rate: the replica collapses.
    assert 1.6 * stable < 0.8 * saturated
    assert _served_share(load, 1.6 * stable) < 0.5


def test_prompts_of_one_slice_keep_their_saturation() -> None:
    """An evicted prompt of one slice comes back in one iteration: no collapse to price."""
    load = _load(1, lengths=(LengthDist(4_000, 0.3, 8_000), LengthDist(500, 0.4, 2_048)))
    assert _capacity(load) == _capacity(attrs.evolve(load, chunk_admission=False))


def test_a_roomy_cache_keeps_most_of_its_saturation() -> None:
    """Eight H100s hold a hundred 20K-token requests: a burst that fills them is rare."""
    load = _load(8)
    assert _capacity(load) > 0.85 * _capacity(attrs.evolve(load, chunk_admission=False))


def test_both_constants_are_live() -> None:
    base = _capacity(_load(2))
    assert _capacity(_load(2, SurrogateConfig(collapse_requests=3_000))) < 0.97 * base
    assert _capacity(_load(2, SurrogateConfig(collapse_dispersion=24.0))) < 0.97 * base


def test_a_bigger_cache_becomes_the_cheaper_chain_per_token() -> None:
    """Per GPU, one H100 and four carry 20K-token summaries about equally at saturation; with
    the collapse, four H100s (a cache for 48 requests) carry far more per GPU than one (7.5)."""
    one, four = _load(1), _load(4)
    whole_one = _capacity(attrs.evolve(one, chunk_admission=False))
    whole_four = _capacity(attrs.evolve(four, chunk_admission=False)) / 4
    assert whole_four == pytest.approx(whole_one, rel=0.1)
    assert _capacity(four) / 4 > 1.5 * _capacity(one)


def test_the_planner_sees_the_stable_rate() -> None:
    """``Surrogate.capacity`` (what the books and best effort size by) and a screen of the
    same chain at a rate between the stable rate and saturation: overloaded with the term,
    carried without it (``collapse_requests = 1`` never finds the replica unstable)."""
    inp, out = _SUMMARY
    w = WorkloadProfile(inp, out, rate_rps=0.2)  # 100 output tokens/s
    job = Job(
        id="summ",
        model="Qwen3-32B",
        job_class="online",
        workload=w,
        target=ServingTarget.online(p99_ttft_ms=20_000, p99_tpot_ms=100),
    )
    chain = Chain("Qwen3-32B", H100_NODE, Config(tp=1, quant=Quant.FP8))
    with_term = Surrogate(gpus(), models())
    without = Surrogate(gpus(), models(), SurrogateConfig(collapse_requests=1))
    stable, saturated = with_term.capacity(job, chain), without.capacity(job, chain)
    assert stable is not None
    assert saturated is not None
    assert stable < 100.0 < saturated
    ladder = Ladder((Rank(chain, 1),))
    assert with_term.screen(job, ladder).ranks[0].outcomes.throughput_tok_s < 100.0
    assert without.screen(job, ladder).ranks[0].outcomes.throughput_tok_s == pytest.approx(100.0)


def test_a_batch_the_cache_holds_whole_does_not_collapse() -> None:
    """Capped at four fifths of the requests its cache holds whole (the candidate generator's
    ``cache_fit_share``), the same replica admits no more than it can finish: the closed form
    credits it its saturation, and the replay keeps up at 90 % of it, where the uncapped
    replica finishes under a fifth of what it is sent."""
    load = _load(1)
    n_fit = load.kv_capacity_tokens / (load.input_len.mean + load.output_len.mean)
    capped = attrs.evolve(load, max_batch_size=int(0.8 * n_fit))
    capacity = _capacity(capped)
    assert capacity > 2.0 * _capacity(load)
    assert _served_share(capped, 0.9 * capacity) > 0.95
    assert _served_share(load, 0.9 * capacity) < 0.2
