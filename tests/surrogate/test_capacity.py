"""``Surrogate.capacity`` (the screener's per-replica capacity without latencies at a rate) is
exactly the capacity a one-replica screen reports, and ``None`` exactly where it is infeasible."""

from __future__ import annotations

from collections.abc import Callable

from tests._support.specs import H100_NODE, gpus, models

from koi.surrogate import RankCorrection, Surrogate
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

_ENV = H100_NODE

Corrections = Callable[[Chain], RankCorrection] | None
#: Asked every question in turn: its memos hold the earlier asks' values.
_SHARED = Surrogate(gpus(), models())


def _online(model: str, rate: float, prefix: float = 0.0) -> Job:
    w = WorkloadProfile(
        LengthDist(1500, 0.5, 8000),
        LengthDist(200, 0.5, 2000),
        rate_rps=rate,
        prefix_share=prefix,
        prefix_count=4,
    )
    target = ServingTarget.online(p99_ttft_ms=2000, p99_tpot_ms=80)
    return Job(id="chat", model=model, job_class="online", workload=w, target=target)


def _batch(model: str, prefix: float = 0.0) -> Job:
    w = WorkloadProfile(
        LengthDist(2000, 0.3, 8000),
        LengthDist(300, 0.3, 2000),
        total_requests=900,
        prefix_share=prefix,
        prefix_count=4,
    )
    target = ServingTarget.batch(deadline_s=3600)
    return Job(id="summ", model=model, job_class="batch", workload=w, target=target)


def _slow(_c: Chain) -> RankCorrection:
    return RankCorrection(decode_time=1.4)


def _fast_prefill(_c: Chain) -> RankCorrection:
    return RankCorrection(prefill_time=0.8, decode_time=0.9)


def test_capacity_is_the_one_replica_screens() -> None:
    asked = 0
    infeasible = 0
    corrected: set[float] = set()
    for model in ("Llama-3.1-8B", "Llama-3.1-70B"):
        jobs = [
            _online(model, 1.0),
            _online(model, 7.0, prefix=0.5),
            _batch(model),
            _batch(model, prefix=0.5),
        ]
        for job in jobs:
            for tp in (1, 2, 8):
                for quant in (Quant.BF16, Quant.FP8):
                    for routing in (Routing.LEAST_LOADED, Routing.PREFIX_AFFINITY):
                        config = Config(tp=tp, quant=quant, routing=routing)
                        chain = Chain(model, _ENV, config)
                        for fn in (None, _slow, _fast_prefill):
                            # A surrogate that has seen other asks, and a fresh one.
                            fresh = Surrogate(gpus(), models())
                            pred = fresh.screen(job, Ladder((Rank(chain, 1),)), corrections=fn)
                            got = _SHARED.capacity(job, chain, corrections=fn)
                            asked += 1
                            if not pred.feasible:
                                infeasible += 1
                                assert got is None
                                continue
                            assert got == pred.ranks[0].capacity_tok_s
                            if job.is_online and tp == 2 and routing is Routing.LEAST_LOADED:
                                corrected.add(got)
    assert asked == 288
    assert 0 < infeasible < asked  # both branches are exercised (70B does not fit on one GPU)
    # The corrections move the capacity: a capacity that ignored them would match only one.
    assert len(corrected) >= 6
