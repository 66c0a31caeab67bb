"""Mechanisms: mined from divergences, admitted, and carrying corrections across strata."""

from __future__ import annotations

import attrs

from koi.beliefs import Beta, stratum_of
from koi.config import KoiConfig
from koi.dag import Mechanism, Scope, admit_mechanism, default_dag
from koi.planner import Planner
from koi.planner._corrections import (
    DECODE_TIME,
    SharedCorrections,
    correction_key,
    job_key,
)
from koi.planner._learn import correction_fn
from koi.planner._mining import mine_mechanisms
from koi.planner._strata import stratum_for
from koi.types import Chain, Config, LengthDist, Quant, Rank

from ._world import CATALOG, chat_job, pools

CFG = KoiConfig()


def _chain(gpu: str, tp: int = 1) -> Chain:
    env = next(p.environment for p in pools(gpus=(gpu,), per_pool=1))
    return Chain("Llama-3.1-8B", env, Config(tp=tp, quant=Quant.BF16))


def _admitted(tested: Chain, tested_key: str, scope: Scope) -> Mechanism:
    """The mechanism mined from a bandwidth-bound TPOT miss in ``tested_key``, with ``scope``."""
    proposal = attrs.evolve(
        mine_mechanisms(
            [(tested_key, "mem_bw_util"), (tested_key, "p99_tpot_ms")],
            {tested_key: Rank(tested, 1)},
            dag=default_dag(),
            gpus=CATALOG.gpus,
            models=CATALOG.models,
        )[0],
        scope=scope,
    )
    mechanism = admit_mechanism(proposal, default_dag()).mechanism
    assert mechanism is not None
    return mechanism


def test_a_divergence_pattern_becomes_an_admissible_mechanism() -> None:
    chain = _chain("L40S", tp=2)
    spec = CATALOG.models["Llama-3.1-8B"]
    stratum = stratum_of(chain, spec).key
    proposals = mine_mechanisms(
        [(stratum, "comm_share"), (stratum, "p99_tpot_ms")],
        {stratum: Rank(chain, 1)},
        dag=default_dag(),
        gpus=CATALOG.gpus,
        models=CATALOG.models,
    )
    assert proposals
    admitted = [admit_mechanism(p, default_dag()) for p in proposals]
    assert any(a.accepted for a in admitted), [a.reason for a in admitted]
    text = proposals[0].scope.to_text()
    assert "interconnect == pcie" in text
    assert "tp >= 2" in text


def test_confident_mechanisms_lend_corrections_to_untested_strata() -> None:
    spec = CATALOG.models["Llama-3.1-8B"]
    tested, untested = _chain("L40S"), _chain("A100-80GB")
    tested_key = stratum_of(tested, spec).key
    base = Planner.initial_state(CFG)
    store = base.corrections.record([(tested_key, DECODE_TIME, 1.0, 1.6, 1.0)], CFG.corrections)
    # Hardware-agnostic: covers the A100 too.
    mechanism = _admitted(tested, tested_key, Scope.parse("size_class == dense-s"))
    job = chat_job()

    def decode_for(belief: Beta) -> float:
        state = attrs.evolve(
            base,
            corrections=store,
            mechanisms=(mechanism.with_belief(belief),),
            mechanism_strata={mechanism.id: (tested_key,)},
        )
        fn = correction_fn(state, job, gpus=CATALOG.gpus, models=CATALOG.models, cfg=CFG)
        return fn(untested).decode_time

    assert decode_for(Beta(1.0, 1.0)) == 1.0  # an untested hypothesis lends nothing
    assert abs(decode_for(Beta(9.0, 1.0)) - 1.6) < 0.02  # a confident one carries the fix


def test_shared_corrections_follow_what_a_mechanism_reads_of_each_job() -> None:
    """Tenants' copies share a chain's correction; a job a confident mechanism's scope reads
    differently, or one with its own evidence on the chain, gets its own — in any order."""
    spec = CATALOG.models["Llama-3.1-8B"]
    tested, untested = _chain("L40S"), _chain("A100-80GB")
    tested_key = stratum_of(tested, spec).key
    base = Planner.initial_state(CFG)
    own = job_key(correction_key(untested, stratum_for(untested, spec, CFG).key), "mine")
    store = base.corrections.record(
        [(tested_key, DECODE_TIME, 1.0, 1.6, 1.0)] + [(own, DECODE_TIME, 1.0, 1.3, 1.0)] * 3,
        CFG.corrections,
    )
    mechanism = _admitted(tested, tested_key, Scope.parse("input_len >= 4000"))  # reads prompts
    state = attrs.evolve(
        base,
        corrections=store,
        mechanisms=(mechanism.with_belief(Beta(9.0, 1.0)),),
        mechanism_strata={mechanism.id: (tested_key,)},
    )
    short = chat_job("short")
    long_prompts = attrs.evolve(
        short,
        id="long",
        workload=attrs.evolve(short.workload, input_len=LengthDist(8000, 0.3, 16000)),
    )
    jobs = [long_prompts, short, chat_job("mine"), attrs.evolve(long_prompts, id="long-copy")]
    expected = {
        j.id: correction_fn(state, j, gpus=CATALOG.gpus, models=CATALOG.models, cfg=CFG)(untested)
        for j in jobs
    }
    for order in (jobs, jobs[::-1]):
        shared = SharedCorrections()
        for j in order:
            full, outcomes = shared.functions(
                state, j, gpus=CATALOG.gpus, models=CATALOG.models, cfg=CFG
            )
            assert full(untested) == expected[j.id], j.id
            assert outcomes(untested) == attrs.evolve(expected[j.id], mediators=()), j.id
    # The three cases differ, so a correction shared too widely would have failed above.
    assert abs(expected["long"].decode_time - 1.6) < 0.02
    assert expected["short"].decode_time == 1.0
    assert abs(expected["mine"].decode_time - 1.3) < 0.02
