"""The surrogate's memos that span predictions (the replays' shared step-time caches, each
load's saturation) return exactly what a fresh surrogate computes."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from tests._support.specs import H100_NODE, chat_job, gpus, models

from koi.surrogate import RankCorrection, Surrogate, SurrogateConfig
from koi.types import (
    Chain,
    Config,
    Job,
    Ladder,
    LengthDist,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

_ENV = H100_NODE


def _batch() -> Job:
    w = WorkloadProfile(LengthDist(2000, 0.3, 8000), LengthDist(300, 0.3, 2000), total_requests=900)
    return Job(
        id="summ",
        model="Llama-3.1-8B",
        job_class="batch",
        workload=w,
        target=ServingTarget.batch(deadline_s=3600),
    )


def _ladder(replicas: int, tp: int = 1) -> Ladder:
    return Ladder((Rank(Chain("Llama-3.1-8B", _ENV, Config(tp=tp)), replicas),))


Corrections = Callable[[Chain], RankCorrection] | None


def _slow(_c: Chain) -> RankCorrection:
    return RankCorrection(decode_time=1.5)


def test_predictions_after_others_equal_a_fresh_surrogates() -> None:
    # Short replays keep the test quick; the memos do not depend on the horizon.
    cfg = SurrogateConfig(replay_min_requests=60, replay_max_requests=120)
    # One step model replayed at several rates, with and without a decode correction, for
    # prompts of two lengths and a batch job: every later prediction reuses what an earlier
    # one cached, and must still be what a surrogate that saw nothing else predicts.
    asks: list[tuple[Job, Ladder, Corrections]] = [
        (chat_job(4.0), _ladder(2), None),
        (chat_job(4.0), _ladder(2), _slow),
        (chat_job(9.0), _ladder(3), None),
        (chat_job(9.0), _ladder(3), _slow),
        (chat_job(4.0, prompt=3000), _ladder(2), None),
        (chat_job(9.0), _ladder(2, tp=2), None),
        (_batch(), _ladder(2), None),
        (_batch(), _ladder(2), _slow),
    ]
    shared = Surrogate(gpus(), models(), cfg)
    for job, ladder, corr in asks:
        for method in ("screen", "predict"):
            got = getattr(shared, method)(job, ladder, now_s=60.0, corrections=corr)
            fresh = getattr(Surrogate(gpus(), models(), cfg), method)(
                job, ladder, now_s=60.0, corrections=corr
            )
            assert got.feasible
            assert got == fresh, (method, job.workload, ladder, corr)
    # The correction changes the step model, so the two must not have shared a cache.
    plain = shared.predict(*asks[0][:2], now_s=60.0)
    slow = shared.predict(*asks[1][:2], now_s=60.0, corrections=_slow)
    assert slow.outcomes.p99_tpot_ms > plain.outcomes.p99_tpot_ms
    assert attrs.evolve(plain, ranks=()) != attrs.evolve(slow, ranks=())


def test_replays_under_moving_corrections_equal_a_fresh_surrogates() -> None:
    # A correction that moves every tick (feedback-milp's smoothed factors): every replay reads
    # the one step-time cache of the uncorrected model through its correction, so what earlier
    # replays put in that cache changes no later prediction.
    cfg = SurrogateConfig(replay_min_requests=60, replay_max_requests=120)
    factors = [(1.0, 1.3), (1.0, 1.31), (0.8, 1.31), (1.2, 0.9), (1.0, 1.3)]
    shared = Surrogate(gpus(), models(), cfg)
    seen = set()
    for job in (chat_job(6.0), chat_job(6.0, prompt=3000), _batch()):
        for prefill, decode in factors:

            def corr(_c: Chain, p: float = prefill, d: float = decode) -> RankCorrection:
                return RankCorrection(prefill_time=p, decode_time=d)

            got = shared.predict(job, _ladder(2), now_s=60.0, corrections=corr)
            fresh = Surrogate(gpus(), models(), cfg).predict(
                job, _ladder(2), now_s=60.0, corrections=corr
            )
            assert got.feasible
            assert got == fresh, (job.workload, prefill, decode)
            seen.add(got.outcomes.p99_tpot_ms)
    assert len(seen) >= 10  # the factors did move the predictions
