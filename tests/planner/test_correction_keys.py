"""Each chain keeps its own residual corrections inside its stratum (model and tensor
parallelism), and a chain with no evidence of its own gets its stratum's.

A stratum pools very different deployments (dense-s holds a 1B and two 8B models; on a
one-GPU-type fleet every job of a size class shares one): one correction for all of them was
the median of unrelated misses, wrong for each (homo-12h, docs/benchmark.md).
"""

from __future__ import annotations

import re

import attrs
import pytest

from koi.config import KoiConfig
from koi.errors import InvalidInput
from koi.planner import Planner
from koi.planner._corrections import (
    DECODE_TIME,
    CorrectionStore,
    SharedCorrections,
    correction_fn,
    correction_key,
)
from koi.planner._strata import stratum_for
from koi.surrogate import RankCorrection, Surrogate
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    LengthDist,
    Observation,
    Outcome,
    Pool,
    Quant,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

from ._world import CATALOG, unhurried_planner

ENV = next(
    e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith("on_demand/p5.48xlarge")
)


def _job(job_id: str, model: str) -> Job:
    workload = WorkloadProfile(LengthDist(512, 0.3, 2048), LengthDist(128, 0.3, 512), rate_rps=4.0)
    target = ServingTarget.online(p99_ttft_ms=2000.0, p99_tpot_ms=200.0)
    return Job(job_id, model, "online", workload, target)


# Same stratum (H100 × dense-s × vLLM), different models: one runs 3x slower than the prior
# says, the other as it says.
SLOW, FAST = _job("slow", "Llama-3.1-8B"), _job("fast", "Qwen3-8B")
LADDERS = {
    j.id: Ladder((Rank(Chain(j.model, ENV, Config(tp=1, quant=Quant.FP8)), 1),))
    for j in (SLOW, FAST)
}


def _learned(slow: Job = SLOW, fast: Job = FAST) -> Planner:
    """A planner that ran both jobs and saw one steady window of each: the TPOT the prior
    predicts with a 3x slower decode step for ``slow``, as predicted for ``fast``."""
    planner = unhurried_planner()
    ladders = {
        j.id: Ladder((Rank(Chain(j.model, ENV, Config(quant=Quant.FP8)), 1),)) for j in (slow, fast)
    }
    active = [ActiveDeployment(j, lad, 0.0) for j, lad in ladders.items()]
    snapshot = ClusterSnapshot(300.0, [slow, fast], [Pool(ENV, 4)], active)
    planner.tick(snapshot, launch=False)  # stores the prior's predictions in the ledger
    surrogate = Surrogate(CATALOG.gpus, CATALOG.models)
    obs = []
    for job, slower in ((slow, 3.0), (fast, 1.0)):
        (rp,) = surrogate.screen(job, ladders[job.id], now_s=300.0).ranks
        step = RankCorrection(decode_time=slower)
        (at,) = surrogate.screen(
            job, ladders[job.id], now_s=300.0, corrections=lambda _c, s=step: s
        ).ranks
        outcomes = attrs.evolve(rp.outcomes, p99_tpot_ms=at.outcomes.p99_tpot_ms)
        requests = int(4.0 * 300.0)
        obs.append(
            Observation(
                job.id, rp.rank.chain, 300.0, 600.0, requests, requests, 1, outcomes, rp.mediators
            )
        )
    planner.tick(attrs.evolve(snapshot, time_s=600.0), obs, launch=False)
    return planner


def _decode(planner: Planner, job: Job, chain: Chain) -> float:
    fn = correction_fn(
        planner.state, job, gpus=CATALOG.gpus, models=CATALOG.models, cfg=planner.config
    )
    return fn(chain).decode_time


def test_each_chain_keeps_its_own_correction() -> None:
    planner = _learned()
    slow_chain = LADDERS[SLOW.id].ranks[0].chain
    fast_chain = LADDERS[FAST.id].ranks[0].chain
    assert _decode(planner, SLOW, slow_chain) == pytest.approx(3.0, rel=0.03)
    assert _decode(planner, FAST, fast_chain) == pytest.approx(1.0, rel=0.03)


def test_each_job_keeps_its_own_correction_on_a_shared_chain() -> None:
    # Two jobs of one model on one chain, one 3x slower than the prior says (its traffic),
    # the other as it says: each plans with its own miss, not the median of both, and a
    # third job of the model that has not run there takes the chain's (the median, 2x).
    slow, fast = _job("slow", "Llama-3.1-8B"), _job("fast", "Llama-3.1-8B")
    planner = _learned(slow, fast)
    chain = Chain(slow.model, ENV, Config(quant=Quant.FP8))
    assert _decode(planner, slow, chain) == pytest.approx(3.0, rel=0.03)
    assert _decode(planner, fast, chain) == pytest.approx(1.0, rel=0.03)
    assert _decode(planner, _job("new", slow.model), chain) == pytest.approx(2.0, rel=0.03)
    # The corrections the planner's evaluation shares across jobs read the same per job
    # (a chain's correction shared by all would fail), in either order.
    for order in ((slow, fast, _job("new", slow.model)), (_job("new", slow.model), fast, slow)):
        shared = SharedCorrections()
        for job in order:
            full, _ = shared.functions(
                planner.state, job, gpus=CATALOG.gpus, models=CATALOG.models, cfg=planner.config
            )
            assert full(chain).decode_time == _decode(planner, job, chain), job.id


def test_a_chain_without_evidence_gets_its_model_on_the_gpu_type_then_its_stratum() -> None:
    planner = _learned()
    # Tensor parallelism 2 of the slow model: no evidence of its own; its model's chain at TP 1
    # on the same GPU type measured it 3x slower, and that is the first guess, not the
    # stratum's median of the two models' factors (3 and 1).
    untried = attrs.evolve(LADDERS[SLOW.id].ranks[0].chain, config=Config(tp=2, quant=Quant.FP8))
    skey = stratum_for(untried, CATALOG.models[SLOW.model], planner.config).key
    assert correction_key(untried, skey) not in {
        e.stratum for e in planner.state.corrections.entries
    }
    assert _decode(planner, SLOW, untried) == pytest.approx(3.0, rel=0.03)
    # A model of the stratum that never ran on it gets the stratum's median.
    stranger = Chain("Llama-3.2-1B", ENV, Config(tp=1, quant=Quant.FP8))
    assert stratum_for(stranger, CATALOG.models["Llama-3.2-1B"], planner.config).key == skey
    assert _decode(planner, SLOW, stranger) == pytest.approx(2.0, rel=0.03)


def test_without_the_causal_graph_evidence_stays_pooled() -> None:
    cfg = KoiConfig()
    nograph = attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, causal_graph=False))
    chain = LADDERS[SLOW.id].ranks[0].chain
    skey = stratum_for(chain, CATALOG.models[SLOW.model], nograph).key
    assert correction_key(chain, skey) == skey


def test_a_chain_with_evidence_of_its_own_takes_nothing_from_its_stratum() -> None:
    # The slow chain learned only its decode step (an overloaded window); the other chain's
    # TTFT factor, learned relative to another decode step, must not come with the stratum.
    planner = unhurried_planner()
    cc = planner.config.corrections
    slow_chain = LADDERS[SLOW.id].ranks[0].chain
    skey = stratum_for(slow_chain, CATALOG.models[SLOW.model], planner.config).key
    slow_key = correction_key(slow_chain, skey)
    fast_key = correction_key(LADDERS[FAST.id].ranks[0].chain, skey)
    samples = [
        *((k, DECODE_TIME, 1.0, 4.0, 1.0) for k in (skey, slow_key)),
        *((k, Outcome.TTFT.value, 1.0, 0.6, 1.0) for k in (skey, fast_key)),
    ]
    store = CorrectionStore().record(samples, cc)
    planner.state = attrs.evolve(planner.state, corrections=store)
    fn = correction_fn(
        planner.state, SLOW, gpus=CATALOG.gpus, models=CATALOG.models, cfg=planner.config
    )
    assert fn(slow_chain).decode_time == pytest.approx(4.0, rel=0.03)
    assert fn(slow_chain).outcome(Outcome.TTFT) == 1.0
    # A chain with no evidence of its own takes its model's other chain on the GPU type, or
    # (for a model without one) the stratum's, both factors together either way.
    untried = attrs.evolve(slow_chain, config=Config(tp=2, quant=Quant.FP8))
    assert fn(untried).decode_time == pytest.approx(4.0, rel=0.03)
    assert fn(untried).outcome(Outcome.TTFT) == 1.0
    stranger = Chain("Llama-3.2-1B", ENV, Config(tp=1, quant=Quant.FP8))
    assert fn(stranger).decode_time == pytest.approx(4.0, rel=0.03)
    assert fn(stranger).outcome(Outcome.TTFT) == pytest.approx(0.6, rel=0.03)


def test_a_model_that_ran_slow_elsewhere_starts_slow_on_an_untried_gpu_type() -> None:
    # The slow model ran 3x slower than predicted on H100; on another GPU type where its
    # stratum has no evidence it starts from that miss, not from the prior (which made jobs
    # hop from one GPU type to the next, each looking fast until tried).  Another model gets
    # nothing from it, and a stratum with evidence of its own keeps precedence.
    planner = _learned()
    other = next(e for e in CATALOG.environments(clouds=["aws"]) if e.gpu != ENV.gpu)
    untried = Chain(SLOW.model, other, Config(tp=1, quant=Quant.FP8))
    assert _decode(planner, SLOW, untried) == pytest.approx(3.0, rel=0.03)
    stranger = Chain("Llama-3.2-1B", other, Config(tp=1, quant=Quant.FP8))
    assert _decode(planner, SLOW, stranger) == 1.0
    cc = planner.config.corrections
    skey = stratum_for(untried, CATALOG.models[SLOW.model], planner.config).key
    store = planner.state.corrections.record([(skey, DECODE_TIME, 1.0, 1.5, 1.0)], cc)
    planner.state = attrs.evolve(planner.state, corrections=store)
    assert _decode(planner, SLOW, untried) == pytest.approx(1.5, rel=0.03)


def test_an_untried_engine_starts_from_the_same_gpu_types_other_engines() -> None:
    # The slow model ran 3x slower than predicted under vLLM on H100.  Under another engine
    # on the same GPU type, where its stratum has no evidence, it starts from that miss: with
    # the uncorrected prior every untried engine looked twice as fast until tried.
    planner = _learned()
    trt = Chain(SLOW.model, ENV, Config(tp=1, quant=Quant.FP8, engine="trtllm"))
    assert _decode(planner, SLOW, trt) == pytest.approx(3.0, rel=0.03)
    # Evidence of its own stratum keeps precedence.
    cc = planner.config.corrections
    skey = stratum_for(trt, CATALOG.models[SLOW.model], planner.config).key
    store = planner.state.corrections.record([(skey, DECODE_TIME, 1.0, 1.5, 1.0)], cc)
    planner.state = attrs.evolve(planner.state, corrections=store)
    assert _decode(planner, SLOW, trt) == pytest.approx(1.5, rel=0.03)


def test_the_planner_says_which_corrections_a_prediction_starts_from() -> None:
    # Planner.corrections_in_force is the public reading of the same: the job's own miss on
    # its chain, a newcomer's borrowed one, the prior before anything was seen, and a clear
    # error for a chain of another model.
    planner = _learned()
    chain = LADDERS[SLOW.id].ranks[0].chain
    mine = planner.corrections_in_force(SLOW, chain)
    assert mine.decode_time == pytest.approx(3.0, rel=0.03)
    assert mine.factors() == {
        "prefill_time": mine.prefill_time,
        "decode_time": mine.decode_time,
        "p99_ttft_ms": mine.outcome(Outcome.TTFT),
        "p99_tpot_ms": mine.outcome(Outcome.TPOT),
    }
    untried = attrs.evolve(chain, config=Config(tp=2, quant=Quant.FP8))
    newcomer = _job("new", SLOW.model)
    assert planner.corrections_in_force(newcomer, untried) == correction_fn(
        planner.state, newcomer, gpus=CATALOG.gpus, models=CATALOG.models, cfg=planner.config
    )(untried)
    assert unhurried_planner().corrections_in_force(SLOW, chain).is_identity
    with pytest.raises(InvalidInput, match=re.escape("chain: runs 'Llama-3.1-8B', but job 'fast'")):
        planner.corrections_in_force(FAST, chain)
    with pytest.raises(InvalidInput, match="needs a Job and a Chain"):
        planner.corrections_in_force(SLOW, LADDERS[SLOW.id])  # type: ignore[arg-type]
