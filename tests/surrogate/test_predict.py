"""The Surrogate API: ladders, traffic split, outcomes, cache, corrections, substitution."""

from __future__ import annotations

import math

import attrs
import pytest
from tests._support.specs import gpus, models

from koi.errors import InvalidInput
from koi.surrogate import (
    EngineProfile,
    OperatorModel,
    RankCorrection,
    Surrogate,
    SurrogateConfig,
    nearest_architecture,
    predict_serving,
)
from koi.surrogate.replay import StepTimeModel
from koi.types import (
    Chain,
    Config,
    Environment,
    GpuSpec,
    Job,
    Ladder,
    LengthDist,
    Mediator,
    ModelSpec,
    Outcome,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

CFG = SurrogateConfig(use_replay=False)


def _env(gpu: str, n: int = 8, price: float = 40.0) -> Environment:
    return Environment(
        cloud="aws",
        region="us-east-1",
        market="on_demand",
        instance_type=f"{gpu}-x{n}",
        gpu=gpu,
        gpus_per_instance=n,
        price_usd_per_h=price,
    )


def _online(rate: float = 4.0, model: str = "Llama-3.1-8B", tpot_ms: float = 80) -> Job:
    w = WorkloadProfile(LengthDist(1000, 0.5, 8000), LengthDist(200, 0.5, 2000), rate_rps=rate)
    return Job(
        id="chat",
        model=model,
        job_class="online",
        workload=w,
        target=ServingTarget.online(p99_ttft_ms=2000, p99_tpot_ms=tpot_ms),
    )


def _batch(n: int = 5000) -> Job:
    w = WorkloadProfile(LengthDist(2000, 0.3, 8000), LengthDist(300, 0.3, 2000), total_requests=n)
    return Job(
        id="summ",
        model="Llama-3.1-8B",
        job_class="batch",
        workload=w,
        target=ServingTarget.batch(deadline_s=3600),
    )


def _ladder(*ranks: tuple[str, int, int]) -> Ladder:
    return Ladder(
        tuple(Rank(Chain("Llama-3.1-8B", _env(g), Config(tp=tp)), n) for g, tp, n in ranks)
    )


@pytest.fixture
def sur() -> Surrogate:
    return Surrogate(gpus(), models(), CFG)


def test_online_prediction_outcomes_and_mediators(sur: Surrogate) -> None:
    p = sur.predict(_online(), _ladder(("H100-SXM", 1, 2)))
    assert p.feasible
    assert p.reason == ""
    y = p.outcomes
    assert 0 < y.p99_ttft_ms < 2000
    assert 0 < y.p99_tpot_ms < 80
    assert y.throughput_tok_s == pytest.approx(4.0 * 200, rel=0.01)
    # Cost per Mtok = price / throughput.
    price = 2 * 40.0 / 8
    assert y.cost_per_mtok_usd == pytest.approx(price / 3600 / y.throughput_tok_s * 1e6)
    assert 0 < y.slo_margin < 1
    v = p.mediators
    for m in Mediator:
        assert v.get(m) >= 0
    assert v.mean_batch_size > 0
    assert v.kv_cache_util > 0
    assert v.mem_bw_util > 0
    assert v.memory_pressure > 0.1


def test_traffic_split_follows_capacity(sur: Surrogate) -> None:
    p = sur.predict(_online(rate=6.0), _ladder(("H100-SXM", 1, 1), ("L4", 1, 1)))
    h100, l4 = p.ranks
    assert h100.traffic_share > 2 * l4.traffic_share
    assert h100.traffic_share + l4.traffic_share == pytest.approx(1.0)
    assert h100.capacity_tok_s > l4.capacity_tok_s
    # Per-rank throughput is what that rank serves under its share.
    assert h100.outcomes.throughput_tok_s == pytest.approx(6.0 * 200 * h100.traffic_share, rel=0.02)


def test_overload_hurts_margin_and_ttft(sur: Surrogate) -> None:
    # An L40S (an L4 holds only ~19K KV tokens of Llama-3.1-8B BF16, too few for this
    # workload's 10K-token tail even at light load).
    light = sur.predict(_online(rate=1.0, tpot_ms=200), _ladder(("L40S", 1, 1)))
    heavy = sur.predict(_online(rate=40.0, tpot_ms=200), _ladder(("L40S", 1, 1)))
    assert heavy.outcomes.p99_ttft_ms > 10 * light.outcomes.p99_ttft_ms
    assert heavy.outcomes.slo_margin < 0 < light.outcomes.slo_margin
    assert heavy.mediators.queue_depth > light.mediators.queue_depth


def test_overload_ttft_grows_with_the_window() -> None:
    job = _online(rate=40.0)

    def surrogate(horizon_s: float) -> Surrogate:
        cfg = SurrogateConfig(
            use_replay=False, replay_horizon_s=horizon_s, replay_max_requests=10**6
        )
        return Surrogate(gpus(), models(), cfg)

    short, long = surrogate(30.0), surrogate(120.0)
    lad = _ladder(("L4", 1, 1))
    assert (
        long.predict(job, lad).outcomes.p99_ttft_ms
        > 2 * short.predict(job, lad).outcomes.p99_ttft_ms
    )
    ok = _online(rate=1.0)
    a, b = short.predict(ok, lad).outcomes.p99_ttft_ms, long.predict(ok, lad).outcomes.p99_ttft_ms
    assert a == pytest.approx(b, rel=0.05)


def test_an_overloaded_screen_waits_as_long_as_its_replay_would() -> None:
    # hetero-3h's summ-qwen32b at 0.14 req/s per replica: the replay of eleven replicas ran
    # about 1,100 s and its backlog aged past 1,800 s, while the screen of five overloaded
    # replicas aged its queue over 30 s only (60 s) and won on value.  Both now measure the
    # backlog over the replay's horizon (300 requests at this rate, 150 s at 2 req/s).
    job, lad = _online(rate=2.0), _ladder(("L4", 1, 1))
    cfg = SurrogateConfig(use_replay=False)
    assert cfg.replay_min_requests / 2.0 == 150.0 > cfg.replay_horizon_s
    screened = Surrogate(gpus(), models(), cfg).screen(job, lad).outcomes.p99_ttft_ms
    at_150 = attrs.evolve(cfg, replay_horizon_s=150.0, replay_min_requests=1)
    expected = Surrogate(gpus(), models(), at_150).screen(job, lad).outcomes.p99_ttft_ms
    assert screened == pytest.approx(expected, rel=0.02)  # the rate is snapped to a grid
    at_30 = Surrogate(gpus(), models(), attrs.evolve(cfg, replay_min_requests=1))
    assert screened > 2 * at_30.screen(job, lad).outcomes.p99_ttft_ms


def test_batch_margin_from_completion_time(sur: Surrogate) -> None:
    small = sur.predict(_batch(2000), _ladder(("H100-SXM", 1, 2)), now_s=0.0)
    huge = sur.predict(_batch(2_000_000), _ladder(("H100-SXM", 1, 2)), now_s=0.0)
    assert small.outcomes.slo_margin > 0 > huge.outcomes.slo_margin
    late = sur.predict(_batch(2000), _ladder(("H100-SXM", 1, 2)), now_s=3500.0)
    assert late.outcomes.slo_margin < small.outcomes.slo_margin
    assert small.outcomes.throughput_tok_s > 0
    assert all(r.outcomes.slo_margin == small.outcomes.slo_margin for r in small.ranks)


def test_infeasible_ladder_has_reason(sur: Surrogate) -> None:
    lad = Ladder((Rank(Chain("Llama-3.1-70B", _env("L40S"), Config()), 1),))
    p = sur.predict(_online(model="Llama-3.1-70B"), lad)
    assert not p.feasible
    assert "weights" in p.reason
    assert math.isinf(p.outcomes.p99_ttft_ms)
    assert p.outcomes.throughput_tok_s == 0
    assert not sur.predict(_online(), Ladder()).feasible
    with pytest.raises(InvalidInput):
        sur.predict(_online(model="Qwen3-8B"), _ladder(("H100-SXM", 1, 1)))


def test_cache_hits_and_keys(sur: Surrogate) -> None:
    job, lad = _online(), _ladder(("H100-SXM", 1, 1))
    a = sur.predict(job, lad)
    b = sur.predict(job, lad)
    assert a is b
    assert sur.hits == 1
    c = sur.predict(attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=5.0)), lad)
    assert c is not a
    assert sur.misses == 2


def test_corrections_scale_step_times_and_outcomes(sur: Surrogate) -> None:
    job, lad = _online(), _ladder(("H100-SXM", 1, 1))
    base = sur.predict(job, lad)
    slow = sur.predict(job, lad, corrections=lambda _c: RankCorrection(decode_time=1.5))
    assert slow.outcomes.p99_tpot_ms > 1.3 * base.outcomes.p99_tpot_ms
    pre = sur.predict(job, lad, corrections=lambda _c: RankCorrection(prefill_time=3.0))
    assert pre.outcomes.p99_ttft_ms > 2 * base.outcomes.p99_ttft_ms
    out = sur.predict(
        job,
        lad,
        corrections=lambda _c: RankCorrection(
            outcomes={Outcome.TTFT: 2.0}, mediators={Mediator.QUEUE_DEPTH: 3.0}
        ),
    )
    assert out.outcomes.p99_ttft_ms == pytest.approx(2 * base.outcomes.p99_ttft_ms, rel=0.01)
    assert out.mediators.queue_depth == pytest.approx(3 * base.mediators.queue_depth)
    with pytest.raises(InvalidInput):
        RankCorrection(outcomes={Outcome.TTFT: 0.0})


def test_replay_and_screen_agree_roughly() -> None:
    sur = Surrogate(gpus(), models(), SurrogateConfig())
    job, lad = _online(), _ladder(("H100-SXM", 1, 2))
    fast, full = sur.screen(job, lad), sur.predict(job, lad)
    assert fast.feasible
    assert full.feasible
    # At light load (no queue) the closed form and the replay see the same steps: they agree
    # to a few per cent; the replay's p99s differ only by its request-level sampling.
    assert full.outcomes.throughput_tok_s == pytest.approx(fast.outcomes.throughput_tok_s, rel=0.05)
    assert full.outcomes.p99_ttft_ms == pytest.approx(fast.outcomes.p99_ttft_ms, rel=0.15)
    assert full.outcomes.p99_tpot_ms == pytest.approx(fast.outcomes.p99_tpot_ms, rel=0.15)


@attrs.frozen
class _Measured:
    """A fake measured profile: the built-in model, 20 % slower, on H100 for Llama-3.1-8B."""

    name: str = "fake"

    def covers(self, gpu: GpuSpec, model: ModelSpec) -> bool:
        return gpu.name == "H100-SXM" and model.name == "Llama-3.1-8B"

    def step_model(self, gpu: GpuSpec, model: ModelSpec, config: Config) -> StepTimeModel:
        from koi.surrogate import ScaledStepModel

        return ScaledStepModel(OperatorModel(gpu, model, config), prefill=1.2, decode=1.2)


def test_nearest_architecture_substitution() -> None:
    ms = models()
    assert (
        nearest_architecture(ms["Qwen3-8B"], [ms["Llama-3.1-8B"], ms["Llama-3.1-70B"]])
        is ms["Llama-3.1-8B"]
    )
    sur = Surrogate(gpus(), ms, CFG, profiles=_Measured())
    job = _online(model="Qwen3-8B")
    lad = Ladder((Rank(Chain("Qwen3-8B", _env("H100-SXM"), Config()), 1),))
    p = sur.predict(job, lad)
    assert p.substituted_from == "Llama-3.1-8B"
    plain = Surrogate(gpus(), ms, CFG).predict(job, lad)
    assert plain.substituted_from is None
    # The measured profile is 20 % slower, and the rescaled substitute carries that over.
    assert p.outcomes.p99_tpot_ms > 1.1 * plain.outcomes.p99_tpot_ms
    direct = sur.predict(_online(), _ladder(("H100-SXM", 1, 1)))
    assert direct.substituted_from is None


def test_predict_serving_rate_and_concurrency() -> None:
    g, m = gpus()["H100-SXM"], models()["Llama-3.1-8B"]
    lo = predict_serving(
        g, m, Config(), isl=1000, osl=200, rate_rps=1.0, cfg=CFG, price_usd_per_gpu_h=4.0
    )
    hi = predict_serving(g, m, Config(), isl=1000, osl=200, concurrency=64, cfg=CFG)
    assert lo.feasible
    assert lo.cost_per_mtok_usd is not None
    assert hi.cost_per_mtok_usd is None
    assert hi.throughput_tok_s > lo.throughput_tok_s
    assert hi.p50_tpot_ms > lo.p50_tpot_ms
    with pytest.raises(InvalidInput):
        predict_serving(g, m, Config(), isl=1000, osl=200, cfg=CFG)
    bad = predict_serving(
        gpus()["L40S"], models()["Llama-3.1-70B"], Config(), isl=10, osl=10, rate_rps=1, cfg=CFG
    )
    assert not bad.feasible
    assert bad.reason


@pytest.mark.parametrize("replay", [True, False])
def test_overload_p99_ttft_grows_with_window_in_predict_serving(replay: bool) -> None:
    g, m = gpus()["L4"], models()["Llama-3.1-8B"]

    def p99(rate: float, horizon: float) -> float:
        cfg = SurrogateConfig(
            replay_horizon_s=horizon, replay_min_requests=1, replay_max_requests=10**6
        )
        return predict_serving(
            g, m, Config(), isl=1000, osl=200, rate_rps=rate, cfg=cfg, replay=replay
        ).p99_ttft_ms

    assert p99(20.0, 120.0) > 1.8 * p99(20.0, 40.0)
    assert p99(0.5, 120.0) == pytest.approx(p99(0.5, 40.0), rel=0.35)


@pytest.mark.parametrize("replay", [True, False])
def test_engine_scheduler_changes_the_closed_loop_split_of_ttft_and_tpot(replay: bool) -> None:
    # Same overheads, only the iteration scheduler differs: prefill-first (SGLang's default)
    # keeps the wave of prompts together, so TTFT grows (and, replayed, TPOT shrinks).
    g, m = gpus()["H100-SXM"], models()["Qwen3-32B"]

    def run(*, mixed: bool) -> tuple[float, float]:
        cfg = SurrogateConfig(engines={"sglang": EngineProfile(1.0, 0.01, mixed_prefill=mixed)})
        p = predict_serving(
            g,
            m,
            Config(engine="sglang", tp=2),
            isl=2048,
            osl=256,
            concurrency=64,
            cfg=cfg,
            replay=replay,
        )
        return p.p50_ttft_ms, p.p50_tpot_ms

    (ttft_mixed, tpot_mixed), (ttft_first, tpot_first) = run(mixed=True), run(mixed=False)
    assert ttft_first > 1.5 * ttft_mixed
    if replay:  # the screen keeps one TPOT formula for both
        assert tpot_first < tpot_mixed


def test_sglang_is_prefill_first_by_default() -> None:
    cfg = SurrogateConfig()
    assert not cfg.engine_profile("sglang").mixed_prefill
    assert cfg.engine_profile("vllm").mixed_prefill
    assert cfg.engine_profile("trtllm").mixed_prefill
