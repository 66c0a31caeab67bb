"""What the planner hands the proposers to focus with: the at-risk outcomes of each incumbent,
the DAG view annotated with the pooled beliefs, and only the mechanisms that can match."""

from __future__ import annotations

import attrs

from koi.beliefs import Beta, Stratum
from koi.dag import DagView, Mechanism, Scope, mechanism_id
from koi.planner import Planner
from koi.plugins import ProposalContext, hookimpl
from koi.types import ActiveDeployment, Chain, ClusterSnapshot, Config, Job, Ladder, Outcome, Rank

from ._world import CATALOG, chat_job, pools

EDGES = (("x:quant", "v:mem_bw_util"), ("v:mem_bw_util", "y:p99_tpot_ms"))


class _Recorder:
    """A proposer that proposes nothing and keeps every context it was given."""

    koi_plugin_name = "recorder"

    def __init__(self) -> None:
        self.contexts: dict[str, ProposalContext] = {}

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> list[Ladder]:
        self.contexts.setdefault(job.id, context)
        return []


def _mechanism(scope: str) -> Mechanism:
    parsed = Scope.parse(scope)
    return Mechanism(mechanism_id(EDGES, parsed), EDGES, parsed, scope, Beta(5.0, 1.0))


def test_the_context_carries_at_risk_outcomes_a_belief_view_and_matching_mechanisms() -> None:
    fleet = pools()
    tight = attrs.evolve(chat_job("tight", rate=40.0), target=chat_job().target)
    idle = chat_job("idle", rate=0.5)
    big = chat_job("big", model="Llama-3.1-70B")
    h100 = next(p.environment for p in fleet if p.environment.gpu == "H100-SXM")
    one = Ladder((Rank(Chain("Llama-3.1-8B", h100, Config(max_batch_size=256)), 1),))
    snapshot = ClusterSnapshot(
        0.0,
        (tight, idle, big),
        fleet,
        (ActiveDeployment("tight", one, 0.0), ActiveDeployment("idle", one, 0.0)),
    )
    recorder = _Recorder()
    planner = Planner(plugins=[recorder], use_default_proposer=False)
    small_class = CATALOG.models["Llama-3.1-8B"].size_class
    mine, other = _mechanism(f"size_class == {small_class}"), _mechanism("model == Llama-3.1-70B")
    stratum = Stratum("H100-SXM", small_class, "vllm")
    evidence = planner.state.evidence.with_belief(EDGES[0], stratum, Beta(1.0, 9.0))
    planner.state = attrs.evolve(planner.state, mechanisms=(mine, other), evidence=evidence)
    planner.tick(snapshot)

    seen = recorder.contexts
    # One replica cannot carry 40 requests/s: its TTFT or TPOT is at (or past) the bound.
    assert seen["tight"].at_risk
    assert set(seen["tight"].at_risk) <= {Outcome.TTFT, Outcome.TPOT}
    assert seen["idle"].at_risk == ()
    assert seen["big"].at_risk == ()  # pending: no incumbent to be at risk
    # The view carries the fleet-pooled belief of each edge.
    view = seen["tight"].dag
    assert isinstance(view, DagView)
    quant_edge = next(e for e in view.edges if (e.source, e.target) == EDGES[0])
    assert quant_edge.confidence is not None
    assert quant_edge.confidence < 0.2
    # Only the mechanisms whose job-level scope matches each job.
    assert seen["tight"].mechanisms == (mine,)
    assert seen["big"].mechanisms == (other,)
