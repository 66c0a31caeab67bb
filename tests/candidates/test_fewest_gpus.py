"""The budget books' shortcut: ``Screener.fewest_gpus`` picks, per GPU type, exactly the option
the full sizing's loop picks (the fewest GPUs meeting the target, the first on a tie), with
the same replicas and screen, while screening fewer options."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from tests._support.specs import H100_NODE, L40S_NODE

from koi.candidates import ProposerConfig, Screener, SizedOption
from koi.catalog import load_catalog
from koi.surrogate import RankCorrection, Surrogate
from koi.types import (
    Chain,
    Job,
    LengthDist,
    Outcome,
    ServingTarget,
    WorkloadProfile,
)

_CATALOG = load_catalog()
_ENVS = [H100_NODE, L40S_NODE]


def _online(rate: float, *, ttft_ms: float = 1500, prefix: float = 0.0) -> Job:
    w = WorkloadProfile(
        LengthDist(1200, 0.5, 8000),
        LengthDist(250, 0.5, 2000),
        rate_rps=rate,
        prefix_share=prefix,
        prefix_count=4,
    )
    target = ServingTarget.online(p99_ttft_ms=ttft_ms, p99_tpot_ms=60)
    return Job(id="chat", model="Llama-3.1-8B", job_class="online", workload=w, target=target)


def _batch() -> Job:
    w = WorkloadProfile(
        LengthDist(2000, 0.3, 8000), LengthDist(300, 0.3, 2000), total_requests=5000
    )
    return Job("summ", "Llama-3.1-8B", "batch", w, ServingTarget.batch(deadline_s=3600))


def _classifier(rate: float) -> Job:
    """Thousand-token prompts, four-token answers: a prompt-heavy service."""
    w = WorkloadProfile(LengthDist(1000, 0.5, 4096), LengthDist(4, 0.3, 16), rate_rps=rate)
    target = ServingTarget.online(p99_ttft_ms=400, p99_tpot_ms=50)
    return Job(id="classify", model="Llama-3.2-1B", job_class="online", workload=w, target=target)


def _random(seed: int) -> Callable[[Chain], RankCorrection]:
    """Step corrections in [1/e, e] drawn per chain (the same chain, the same draw)."""

    def fn(chain: Chain) -> RankCorrection:
        rng = random.Random(f"{seed}/{chain.environment.gpu}/{chain.config}")
        prefill, decode = (math.exp(rng.uniform(-1.0, 1.0)) for _ in range(2))
        return RankCorrection(prefill_time=prefill, decode_time=decode)

    return fn


def _slower_on_l40s(chain: Chain) -> RankCorrection:
    if chain.environment.gpu != "L40S":
        return RankCorrection()
    return RankCorrection(decode_time=1.3, outcomes={Outcome.TTFT: 1.2})


def _picked_by_the_loop(sized: Sequence[SizedOption]) -> dict[str, SizedOption]:
    """What the budget books read before the shortcut: per GPU type, the first option with
    the fewest GPUs among those meeting the target."""
    best: dict[str, SizedOption] = {}
    for s in sized:
        need = s.replicas * s.option.config.gpus
        have = best.get(s.option.gpu)
        if s.meets_target and (have is None or need < have.replicas * have.option.config.gpus):
            best[s.option.gpu] = s
    return best


def _screener() -> Screener:
    return Screener(Surrogate(_CATALOG.gpus, _CATALOG.models), ProposerConfig())


def test_the_fewest_gpus_are_the_full_sizings_pick_with_fewer_screens() -> None:
    jobs = [_online(r) for r in (0.5, 6.0, 40.0, 300.0)]
    jobs += [_online(12.0, ttft_ms=250), _online(20.0, prefix=0.6), _batch(), _classifier(36.0)]
    ties = fewer = 0
    for job in jobs:
        for corrections in (None, _slower_on_l40s, _random(1), _random(2), _random(3)):
            full, lazy = _screener(), _screener()
            sized = full.sized_options(
                job, _ENVS, _CATALOG.gpus, now_s=60.0, corrections=corrections
            )
            want = _picked_by_the_loop(sized)
            got = lazy.fewest_gpus(job, _ENVS, _CATALOG.gpus, now_s=60.0, corrections=corrections)
            assert {s.option.gpu: s for s in got} == want, (job.workload.rate_rps, corrections)
            assert [s.option.gpu for s in got] == sorted(want)
            # Read from the full sizing once it is memoized: the same picks.
            again = full.fewest_gpus(job, _ENVS, _CATALOG.gpus, now_s=60.0, corrections=corrections)
            assert again == got
            fewer += lazy.surrogate.misses < full.surrogate.misses
            for gpu, pick in want.items():
                need = pick.replicas * pick.option.config.gpus
                ties += (
                    sum(
                        1
                        for s in sized
                        if s.option.gpu == gpu
                        and s.meets_target
                        and s.replicas * s.option.config.gpus == need
                    )
                    > 1
                )
    assert ties > 0  # the first-on-a-tie rule was exercised
    assert fewer >= len(jobs)  # and the shortcut screened less than the full sizing


class _Counting(Surrogate):
    """A surrogate that counts the corrected capacities it is asked for."""

    asked = 0

    def capacity(self, *args: Any, **kwargs: Any) -> float | None:
        self.asked += 1
        return super().capacity(*args, **kwargs)


def test_the_pick_corrects_only_the_capacities_that_could_come_first() -> None:
    # A step correction bounds the corrected capacity (and so the GPUs) before it is computed:
    # options that cannot have the fewest GPUs are never corrected.
    jobs = [_online(r) for r in (0.5, 6.0, 40.0, 300.0)] + [_batch(), _classifier(36.0)]
    lazy = full = 0
    for job in jobs:
        for corrections in (_slower_on_l40s, _random(1), _random(2)):
            a, b = (_Counting(_CATALOG.gpus, _CATALOG.models) for _ in range(2))
            Screener(a, ProposerConfig()).fewest_gpus(
                job, _ENVS, _CATALOG.gpus, now_s=60.0, corrections=corrections
            )
            Screener(b, ProposerConfig()).sized_options(
                job, _ENVS, _CATALOG.gpus, now_s=60.0, corrections=corrections
            )
            assert a.asked <= b.asked
            lazy, full = lazy + a.asked, full + b.asked
    assert lazy < full * 3 // 4  # 543 of 912 when written; all of them before
