"""koi.testing strategies: valid by construction, bounds honoured, impossible bounds refused."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import koi.testing as kt
from koi.errors import InvalidInput
from koi.types import ClusterSnapshot, JobClass, Market, ModelSpec, Plan


@given(kt.gpu_specs(min_memory_gib=40.0, max_memory_gib=41.0))
def test_gpu_memory_bounds(gpu: Any) -> None:
    assert 40.0 <= gpu.memory_gib <= 41.0


@given(
    kt.environments(markets=st.just(Market.SPOT), min_gpus_per_instance=4, max_gpus_per_instance=4)
)
def test_spot_environments_have_a_hazard(env: Any) -> None:
    assert env.preemption_per_h > 0
    assert env.gpus_per_instance == 4


@given(kt.model_specs(moe=True, min_params_b=30.0, max_params_b=40.0))
def test_moe_models(model: ModelSpec) -> None:
    assert model.is_moe
    assert 30.0 <= model.params_b <= 40.0
    assert model.active_params_b <= model.params_b


@given(kt.model_specs(moe=False))
def test_dense_models(model: ModelSpec) -> None:
    assert not model.is_moe
    assert model.active_params_b == model.params_b


@given(kt.jobs(job_class=JobClass.BATCH))
def test_batch_jobs(job: Any) -> None:
    assert not job.is_online
    assert job.workload.total_requests is not None
    assert 0 <= job.remaining_requests <= job.workload.total_requests


@given(kt.jobs(job_class=JobClass.ONLINE, models=st.just("Qwen3-8B")))
def test_online_jobs(job: Any) -> None:
    assert job.is_online
    assert job.model == "Qwen3-8B"
    assert job.target.p99_ttft_ms is not None


@given(kt.configs(max_tp=2, max_pp=1))
def test_config_bounds(config: Any) -> None:
    assert config.tp in (1, 2)
    assert config.pp == 1


@given(kt.ladders(min_size=2, max_size=3, ranks=kt.ranks(min_replicas=3, max_replicas=3)))
def test_ladder_bounds(ladder: Any) -> None:
    assert 2 <= len(ladder.ranks) <= 3
    assert all(r.replicas == 3 for r in ladder.ranks)


@given(kt.outcomes(allow_infinity=True))
def test_outcomes_are_never_nan(outcomes: Any) -> None:
    assert not any(math.isnan(v) for v in outcomes.as_dict().values())


@given(kt.observations())
def test_observations_are_consistent(obs: Any) -> None:
    assert obs.end_s > obs.start_s
    assert obs.completed <= obs.requests


@given(kt.snapshots(min_jobs=2, max_jobs=4, min_pools=2, max_pools=3))
def test_snapshots_are_consistent(snapshot: ClusterSnapshot) -> None:
    assert 2 <= len(snapshot.jobs) <= 4
    assert 2 <= len(snapshot.pools) <= 3
    used: dict[str, int] = {}
    for active in snapshot.active:
        job = snapshot.job(active.job_id)
        for rank in active.ladder.ranks:
            assert rank.chain.model == job.model
            pool = snapshot.pool(rank.chain.environment.id)
            assert pool.environment == rank.chain.environment
            used[pool.id] = used.get(pool.id, 0) + rank.gpus
    for pool_id, gpus in used.items():
        assert gpus <= snapshot.pool(pool_id).capacity_gpus
    groups = {j.id: j.quota_group for j in snapshot.jobs}
    for quota in snapshot.quotas:
        held = sum(a.ladder.gpus for a in snapshot.active if groups[a.job_id] == quota.group)
        assert held <= quota.max_gpus


@given(kt.plans(min_actions=1, max_actions=3))
def test_plans(plan: Plan) -> None:
    assert 1 <= len(plan.actions) <= 3


@given(kt.launch_results())
def test_launch_results_materialize_a_part(result: Any) -> None:
    assert result.materialized.replicas <= result.requested.replicas


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        (
            lambda: kt.gpu_specs(min_memory_gib=80.0, max_memory_gib=40.0),
            "min_memory_gib: must be <=",
        ),
        (lambda: kt.gpu_specs(min_memory_gib=0.0), "min_memory_gib: must be > 0"),
        (lambda: kt.gpu_specs(max_memory_gib=math.inf), "max_memory_gib: must be a finite"),
        (lambda: kt.environments(min_gpus_per_instance=0), "min_gpus_per_instance: must be >= 1"),
        (lambda: kt.pools(min_capacity=5, max_capacity=1), "min_capacity: must be <="),
        (lambda: kt.pools(min_capacity=1.5), "min_capacity: must be an integer"),  # type: ignore[arg-type]
        (lambda: kt.model_specs(min_params_b=-1.0), "min_params_b: must be > 0"),
        (lambda: kt.length_dists(min_mean=10.0, max_mean=5.0), "min_mean: must be <="),
        (lambda: kt.jobs(job_class="online"), "job_class: must be a JobClass"),  # type: ignore[arg-type]
        (lambda: kt.configs(max_tp=0), "max_tp"),
        (lambda: kt.ranks(min_replicas=0), "min_replicas: must be >= 1"),
        (lambda: kt.ladders(min_size=3, max_size=2), "min_size: must be <="),
        (lambda: kt.snapshots(min_jobs=-1), "min_jobs: must be >= 0"),
        (lambda: kt.snapshots(min_pools=0), "min_pools: must be >= 1"),
        (lambda: kt.plans(min_actions=4, max_actions=1), "min_actions: must be <="),
        (lambda: kt.names(min_size=0), "min_size: must be >= 1"),
        (lambda: kt.quotas(min_gpus=9, max_gpus=8), "min_gpus: must be <="),
    ],
)
def test_impossible_bounds_are_refused_on_first_use(strategy: Any, message: str) -> None:
    built = strategy()  # building the strategy never raises ...
    with pytest.raises(InvalidInput, match=message):
        built.validate()  # ... using it does, instead of silently generating nothing


def test_register_type_strategies_covers_every_value_type() -> None:
    # Hypothesis' type registry is process-global: check it in a child process, so that the
    # rest of this test session keeps Hypothesis' own inference.
    script = """
import attrs
from hypothesis import HealthCheck, given, settings, strategies as st
import koi.types as t
from koi.testing import register_type_strategies

register_type_strategies()
kinds = [getattr(t, n) for n in t.__all__ if attrs.has(getattr(t, n))]
for kind in kinds:
    # Valid by construction means it survives the JSON round trip unchanged (validators run
    # again on the way back in).
    @settings(
        max_examples=25,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.from_type(kind))
    def check(value):
        assert type(value) is kind
        assert t.from_json(t.to_json(value), kind) == value
    check()
print(len(kinds))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    import attrs

    import koi.types as t

    assert done.stdout.strip() == str(sum(attrs.has(getattr(t, n)) for n in t.__all__))
