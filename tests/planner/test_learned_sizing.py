"""koi sizes its candidates with what it has learned: a stratum's residual corrections enter
replica sizing, so a job the evaluator now knows to be slower is offered enough replicas."""

from __future__ import annotations

import attrs

from koi.config import KoiConfig
from koi.planner import Planner, TickResult
from koi.planner._corrections import DECODE_TIME, CorrectionStore
from koi.planner._strata import stratum_for
from koi.types import (
    ActionKind,
    AdmissionPolicy,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    LengthDist,
    Outcome,
    Pool,
    Quant,
    ServingTarget,
    WorkloadProfile,
)

from ._world import CATALOG

ENV = next(e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith("on_demand/g6e.xlarge"))
MODEL = "Llama-3.1-8B"
# A pending online job that needs a few L40S replicas; refusal (not best effort) is its
# policy, so a plan either sizes it within C3 or defers it.
JOB = Job(
    "chat",
    MODEL,
    "online",
    WorkloadProfile(LengthDist(512, 0.3, 2048), LengthDist(128, 0.3, 512), rate_rps=36.0),
    ServingTarget.online(p99_ttft_ms=1000.0, p99_tpot_ms=100.0),
    admission=AdmissionPolicy.REFUSE,
)
SNAPSHOT = ClusterSnapshot(600.0, [JOB], [Pool(ENV, 16)], [])


def _planner() -> Planner:
    # One proposal round: the later rounds' fixed headroom would hide a sizing that ignores
    # the corrections for a 30 % miss (it adds a third of the replicas per round).
    cfg = KoiConfig()
    planner = attrs.evolve(
        cfg.planner, tick_deadline_s=None, proposer_timeout_s=None, search_rounds=1
    )
    return Planner(config=attrs.evolve(cfg, planner=planner))


def _learned(planner: Planner, factor: float) -> Planner:
    """``planner`` with evidence that every L40S stratum of the job is ``factor`` slower
    (decode step and p99 TTFT), as S3 would have recorded it."""
    cc = planner.config.corrections
    spec = CATALOG.models[MODEL]
    strata = {
        stratum_for(Chain(MODEL, ENV, Config(tp=tp, quant=q)), spec, planner.config).key
        for tp in (1, 2, 4, 8)
        for q in Quant
    }
    samples = [
        (key, variable, 1.0, factor, 1.0)
        for key in sorted(strata)
        for variable in (DECODE_TIME, Outcome.TTFT.value)
        for _ in range(cc.min_samples)
    ]
    planner.state = attrs.evolve(planner.state, corrections=CorrectionStore().record(samples, cc))
    return planner


def _offered(result: TickResult) -> list[int]:
    return [c.ladder.replicas for c in result.candidates_for("chat") if not c.ladder.is_empty]


def test_a_stratum_learned_slower_gets_more_replicas_and_the_job_is_admitted() -> None:
    before = _planner().tick(SNAPSHOT, launch=False)
    assert before.plan.action("chat").kind is ActionKind.PLACE
    after = _learned(_planner(), 1.3).tick(SNAPSHOT, launch=False)
    action = after.plan.action("chat")
    # Sized on the prior, every candidate's corrected forecast breached and the job was
    # deferred; sized for the corrected capacity it is placed, on more replicas.
    assert action.kind is ActionKind.PLACE
    assert action.ladder.replicas > before.plan.action("chat").ladder.replicas
    assert max(_offered(after)) > max(_offered(before))
    assert sum(_offered(after)) > sum(_offered(before))
    chosen = next(c for c in after.candidates_for("chat") if c.chosen)
    assert chosen.breach_probability <= KoiConfig().planner.tau  # within C3, not best effort


def test_no_evidence_sizes_on_the_prior() -> None:
    # An identity correction is no evidence: the proposals are the prior's.
    before = _planner().tick(SNAPSHOT, launch=False)
    again = _learned(_planner(), 1.0).tick(SNAPSHOT, launch=False)
    assert _offered(again) == _offered(before)
    assert again.plan.action("chat").ladder == before.plan.action("chat").ladder
