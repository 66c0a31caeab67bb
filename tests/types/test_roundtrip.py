"""Every value type survives a JSON round trip unchanged (property tests)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import koi.testing as kt
from koi.types import Chain, Config, Environment, from_data, from_json, to_data, to_json

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "GpuSpec": kt.gpu_specs(),
    "Environment": kt.environments(),
    "Pool": kt.pools(),
    "Quota": kt.quotas(),
    "ModelSpec": kt.model_specs(),
    "LengthDist": kt.length_dists(),
    "WorkloadProfile": kt.workloads(),
    "ServingTarget": kt.targets(),
    "ObjectiveWeights": kt.objective_weights(),
    "Job": kt.jobs(),
    "Config": kt.configs(),
    "Chain": kt.chains(),
    "Rank": kt.ranks(),
    "Ladder": kt.ladders(),
    "Outcomes": kt.outcomes(allow_infinity=True),
    "Mediators": kt.mediators(),
    "Observation": kt.observations(),
    "Resolution": kt.resolutions(),
    "ActiveDeployment": kt.active_deployments(),
    "ClusterSnapshot": kt.snapshots(),
    "JobAction": kt.job_actions(),
    "Plan": kt.plans(),
    "LaunchResult": kt.launch_results(),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_json_round_trip(name: str) -> None:
    @given(STRATEGIES[name])
    def check(value: Any) -> None:
        assert type(value).__name__ == name
        text = to_json(value)
        back = from_json(text, type(value))
        assert back == value
        assert to_json(back) == text  # and the text is stable
        assert from_data(json.loads(text), type(value)) == value

    check()


@given(kt.plans())
def test_plan_diagnostics_round_trip(plan: Any) -> None:
    data = to_data(plan)
    data["diagnostics"] = {"solver": "highs", "gap": 0.01, "binding": ["C1"]}
    back = from_data(json.loads(json.dumps(data)), type(plan))
    assert back.diagnostics == data["diagnostics"]


def test_every_public_value_type_is_covered() -> None:
    import attrs

    import koi.types as t

    public = {n for n in t.__all__ if attrs.has(getattr(t, n))}
    assert public == set(STRATEGIES)


_FRESH_CHAIN = (
    "Chain('Llama-3.1-8B', Environment('aws', 'us-east-1', 'spot', 'p5', 'H100-SXM', 8, 98.0), "
    "Config())"
)


def test_a_cached_hash_is_not_carried_into_another_process() -> None:
    # The value types the planner keys its memos by cache their hash; string hashes differ
    # between processes, so a value pickled to a bench worker must hash afresh there (else
    # it would miss every dict it is looked up in).
    env = Environment("aws", "us-east-1", "spot", "p5", "H100-SXM", 8, 98.0)
    chain = Chain("Llama-3.1-8B", env, Config())  # the value _FRESH_CHAIN builds
    here = hash(chain)  # fills the cache in this process
    check = (
        "import pickle, sys; from koi.types import Chain, Config, Environment; "
        f"c = pickle.loads(sys.stdin.buffer.read()); fresh = {_FRESH_CHAIN}; "
        "print({c: 1}.get(fresh), hash(c) == hash(fresh), hash(fresh))"
    )
    out = subprocess.run(
        [sys.executable, "-c", check],
        input=pickle.dumps(chain),
        capture_output=True,
        check=True,
        env={"PYTHONHASHSEED": "12345"},
    ).stdout.split()
    if int(out[2]) == here:
        pytest.skip("this process hashes strings as the child does (PYTHONHASHSEED=12345)")
    assert out[:2] == [b"1", b"True"]
