"""The cost scale's shortcuts give exactly what a full sizing gives: ``Surrogate.screen_cost``
is the screen's throughput and cost, ``Screener.cheapest_cost`` the sized options' cheapest
(costing only those that can be), and online jobs of one shape (differing in id only) share one
sizing."""

from __future__ import annotations

from typing import Any

import attrs
from tests._support.specs import H100_NODE, L40S_NODE

from koi.candidates import ProposerConfig, Screener
from koi.catalog import load_catalog
from koi.surrogate import Surrogate
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


def _online(rate: float, prefix: float = 0.0, job_id: str = "chat") -> Job:
    w = WorkloadProfile(
        LengthDist(1200, 0.5, 8000),
        LengthDist(250, 0.5, 2000),
        rate_rps=rate,
        prefix_share=prefix,
        prefix_count=4,
    )
    target = ServingTarget.online(p99_ttft_ms=1500, p99_tpot_ms=60)
    return Job(id=job_id, model="Llama-3.1-8B", job_class="online", workload=w, target=target)


def _batch() -> Job:
    w = WorkloadProfile(
        LengthDist(2000, 0.3, 8000), LengthDist(300, 0.3, 2000), total_requests=5000
    )
    return Job("summ", "Llama-3.1-8B", "batch", w, ServingTarget.batch(deadline_s=3600))


def _surrogate() -> Surrogate:
    catalog = load_catalog()
    return Surrogate(catalog.gpus, catalog.models)


def test_screen_cost_is_the_screens_throughput_and_cost() -> None:
    fresh, shared = _surrogate(), _surrogate()
    asked = saturated = 0
    for job in [_online(r, p) for r in (0.5, 6.0, 40.0, 400.0) for p in (0.0, 0.6)] + [_batch()]:
        for tp in (1, 2, 4):
            for quant in (Quant.BF16, Quant.FP8, Quant.INT4):
                routing = Routing.PREFIX_AFFINITY if tp == 2 else Routing.LEAST_LOADED
                config = Config(tp=tp, quant=quant, routing=routing)
                for replicas in (1, 3):
                    one = Rank(Chain(job.model, H100_NODE, config), replicas)
                    ladders = [
                        Ladder((one,)),
                        Ladder((one, Rank(Chain(job.model, L40S_NODE, config), 2))),
                    ]
                    for ladder in ladders:
                        pred = fresh.screen(job, ladder, now_s=60.0)
                        got = shared.screen_cost(job, ladder, now_s=60.0)
                        asked += 1
                        if not pred.feasible:
                            assert got is None
                            continue
                        out = pred.outcomes
                        assert got == (out.throughput_tok_s, out.cost_per_mtok_usd)
                        saturated += any(
                            r.outcomes.throughput_tok_s >= 0.999 * r.capacity_tok_s
                            for r in pred.ranks
                        )
    assert asked >= 300
    assert saturated > 0  # some ladders are past saturation: served at capacity


class _Counting(Surrogate):
    """A surrogate that counts the ladders it is asked to cost."""

    costed = 0

    def screen_cost(self, *args: Any, **kwargs: Any) -> tuple[float, float] | None:
        self.costed += 1
        return super().screen_cost(*args, **kwargs)


def test_the_cheapest_cost_is_the_sized_options_cheapest_costing_fewer() -> None:
    catalog = load_catalog()
    envs = [H100_NODE, L40S_NODE]
    costed = options = 0
    jobs = [_online(r, p) for r in (0.5, 3.0, 25.0, 400.0) for p in (0.0, 0.5)] + [_batch()]
    for job in jobs:
        for prices in ({"H100-SXM": 2.0, "L40S": 1.0}, {"H100-SXM": 0.5, "L40S": 3.0}):
            full = Screener(Surrogate(catalog.gpus, catalog.models), ProposerConfig())
            cheap = Screener(_Counting(catalog.gpus, catalog.models), ProposerConfig())
            sized = full.sized_options(job, envs, catalog.gpus, now_s=120.0)
            want = min(
                s.prediction.outcomes.cost_per_mtok_usd
                * prices[s.option.gpu]
                / s.option.shape.price_usd_per_gpu_h
                for s in sized
                if s.prediction.outcomes.throughput_tok_s > 0
            )
            got = cheap.cheapest_cost(job, envs, catalog.gpus, now_s=120.0, price_per_gpu=prices)
            assert got == want, (job.workload.rate_rps, prices)
            # Once sized, the memo answers, with the same value.
            again = full.cheapest_cost(job, envs, catalog.gpus, now_s=120.0, price_per_gpu=prices)
            assert again == want
            if job.is_online:
                costed += cheap.surrogate.costed  # type: ignore[attr-defined]
                options += len(sized)
    # A ladder's cost is bounded by its price over the offered tokens: most are never costed.
    assert costed < options / 4  # 42 of 448 when written


def test_online_jobs_of_one_shape_share_a_sizing_and_others_do_not() -> None:
    catalog = load_catalog()
    envs = [H100_NODE, L40S_NODE]
    screener = Screener(Surrogate(catalog.gpus, catalog.models), ProposerConfig())
    first = screener.sized_options(_online(8.0), envs, catalog.gpus, now_s=0.0)
    copy = _online(8.0, job_id="chat-tenant-2")
    shared = screener.sized_options(copy, envs, catalog.gpus, now_s=0.0)
    alone = Screener(Surrogate(catalog.gpus, catalog.models), ProposerConfig())
    assert shared == alone.sized_options(copy, envs, catalog.gpus, now_s=0.0) == first
    busier = attrs.evolve(copy, workload=attrs.evolve(copy.workload, rate_rps=16.0))
    more = screener.sized_options(busier, envs, catalog.gpus, now_s=0.0)
    assert sum(s.replicas for s in more) > sum(s.replicas for s in first)
