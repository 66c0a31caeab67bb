"""Making room: a proposer may count GPUs other jobs could release as free."""

from __future__ import annotations

import pytest

from koi.candidates import CandidateGenerator, ProposalContext
from koi.catalog import load_catalog
from koi.errors import InvalidInput
from koi.surrogate import Surrogate
from koi.types import (
    ActiveDeployment,
    Chain,
    ClusterSnapshot,
    Config,
    Job,
    Ladder,
    LengthDist,
    Pool,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

CATALOG = load_catalog()
ENV = next(e for e in CATALOG.environments(clouds=["aws"]) if e.id.endswith("on_demand/g6e.xlarge"))


def _job(job_id: str) -> Job:
    workload = WorkloadProfile(LengthDist(512, 0.3, 2048), LengthDist(128, 0.3, 512), rate_rps=2.0)
    target = ServingTarget.online(p99_ttft_ms=2000.0, p99_tpot_ms=100.0)
    return Job(job_id, "Llama-3.1-8B", "online", workload, target)


def test_reclaimable_gpus_count_as_free() -> None:
    full = Ladder((Rank(Chain("Llama-3.1-8B", ENV, Config()), 4),))
    snapshot = ClusterSnapshot(
        0.0, [_job("old"), _job("new")], [Pool(ENV, 4)], [ActiveDeployment("old", full)]
    )
    generator = CandidateGenerator(Surrogate(dict(CATALOG.gpus), dict(CATALOG.models)))

    def propose(reclaimable: dict[str, int]) -> list[Ladder]:
        context = ProposalContext(
            snapshot=snapshot,
            gpus=dict(CATALOG.gpus),
            models=dict(CATALOG.models),
            reclaimable=reclaimable,
        )
        return generator.propose(_job("new"), context)

    assert propose({}) == []  # the pool is full
    ladders = propose({ENV.id: 2})
    assert ladders
    assert all(lad.gpus <= 2 for lad in ladders)


def test_reclaimable_counts_are_checked() -> None:
    snapshot = ClusterSnapshot(0.0, [_job("new")], [Pool(ENV, 4)], [])
    with pytest.raises(InvalidInput, match="reclaimable"):
        ProposalContext(
            snapshot=snapshot,
            gpus=dict(CATALOG.gpus),
            models=dict(CATALOG.models),
            reclaimable={ENV.id: -1},
        )
