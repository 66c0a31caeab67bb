"""Routing is a searched decision where a job shares prompt prefixes (issue 23)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import attrs
import pytest

from koi.candidates import ProposalContext, routing_matters, with_routing
from koi.cli import main
from koi.dag import default_dag
from koi.plugins import DefaultProposer
from koi.surrogate import Surrogate
from koi.testing.fakes import example_gpus, example_models, example_snapshot
from koi.types import ClusterSnapshot, Job, Ladder, Outcome, Routing, to_json


def _with_prefixes(snapshot: ClusterSnapshot, job_id: str, prefixes: int) -> ClusterSnapshot:
    def change(job: Job) -> Job:
        if job.id != job_id:
            return job
        w = job.workload
        tokens = int(w.input_len.mean * 0.6)
        return attrs.evolve(
            job, workload=attrs.evolve(w, prefix_tokens=tokens, prefix_count=prefixes)
        )

    return attrs.evolve(snapshot, jobs=tuple(change(j) for j in snapshot.jobs))


def _propose(snapshot: ClusterSnapshot, job: Job) -> list[Ladder]:
    proposer = DefaultProposer(Surrogate(example_gpus(), example_models()))
    context = ProposalContext(
        snapshot=snapshot,
        gpus=example_gpus(),
        models=example_models(),
        deadline_s=time.monotonic() + 30.0,
        incumbent=None,
        max_candidates=12,
    )
    return list(proposer.koi_propose_ladders(job, context))


def _routings(ladders: list[Ladder]) -> set[Routing]:
    return {r.chain.config.routing for lad in ladders for r in lad.ranks if r.replicas > 1}


def test_routing_matters_only_with_several_shared_prefixes() -> None:
    snap = example_snapshot()
    assert not routing_matters(snap.job("chat"))
    assert not routing_matters(_with_prefixes(snap, "chat", 1).job("chat"))
    assert routing_matters(_with_prefixes(snap, "chat", 32).job("chat"))


def test_the_proposer_offers_prefix_affinity_only_where_prefixes_are_shared() -> None:
    snap = example_snapshot()
    shared = _with_prefixes(snap, "chat", 32)
    job = shared.job("chat")
    job = attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=80.0))  # many replicas
    ladders = _propose(shared, job)
    assert Routing.PREFIX_AFFINITY in _routings(ladders)
    plain = attrs.evolve(job, workload=attrs.evolve(job.workload, prefix_tokens=None))
    assert Routing.PREFIX_AFFINITY not in _routings(_propose(snap, plain))


def test_with_routing_leaves_single_replicas_alone() -> None:
    ladder = example_snapshot().current_ladders["chat"]
    assert ladder.replicas == 1
    assert with_routing(ladder, Routing.PREFIX_AFFINITY) == ladder


def test_the_graph_has_the_routing_to_hit_rate_to_ttft_path() -> None:
    dag = default_dag()
    view = dag.view()
    assert ("x:routing", "v:prefix_hit_rate") in dag.edges
    assert ("v:prefix_hit_rate", "y:p99_ttft_ms") in dag.edges
    assert "routing" in {d.value for d, _ in view.decisions_for([Outcome.TTFT], 0.05)}


def test_koi_plan_explains_the_routing_of_a_job_with_shared_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = _with_prefixes(example_snapshot(), "chat", 32)
    job = snap.job("chat")
    # Busy enough that even with its prefixes cached the job needs several replicas.
    busy = attrs.evolve(job, workload=attrs.evolve(job.workload, rate_rps=150.0))
    snap = attrs.evolve(snap, jobs=tuple(busy if j.id == "chat" else j for j in snap.jobs))
    path = tmp_path / "snap.json"
    path.write_text(to_json(snap))
    assert main(["plan", str(path), "--json"]) == 0
    jobs = {j["job_id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}
    routing = jobs["chat"]["routing"]
    assert routing is not None
    assert routing["prefixes"] == 32
    assert set(routing["options"]) == {"prefix_affinity", "least_loaded", "round_robin"}
    assert all(0.0 <= o["prefix_hit_rate"] <= 1.0 for o in routing["options"].values())
    assert main(["plan", str(path)]) == 0
    assert "routing: " in capsys.readouterr().out
