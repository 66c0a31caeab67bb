"""docs/integrations.md: its RBAC manifests and its sample SkyServe YAML are valid."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
yaml = pytest.importorskip("yaml")


def _yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_rbac_passes_strict_validation() -> None:
    pytest.importorskip("kubernetes_validate")
    from tests.integrations.kubernetes._schemas import VERSIONS, validate

    rbac = next(b for b in _yaml_blocks() if "kind: ClusterRole" in b)
    docs = list(yaml.safe_load_all(rbac))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ]
    for doc in docs:
        validate(doc, VERSIONS[0])
    role = docs[3]
    verbs = {r["resources"][0]: set(r["verbs"]) for r in role["rules"]}
    assert {"patch", "create"} <= verbs["deployments"] & verbs["leaderworkersets"]


def test_the_sample_service_yaml_is_what_koi_renders() -> None:
    from koi.catalog import load_catalog
    from koi.integrations.skypilot import SkyPilotSettings, render_service_config
    from koi.types import Chain, Config, Rank

    sample = yaml.safe_load(next(b for b in _yaml_blocks() if "readiness_probe" in b))
    env = load_catalog().instance("aws", "g6.xlarge").environment("us-east-1", "on_demand")
    rank = Rank(Chain("Llama-3.1-8B", env, Config(quant="int4", max_batch_size=64)), 1)
    rendered = render_service_config("chat-8b", rank, SkyPilotSettings(), load_catalog())
    assert sample["name"] == rendered["name"]
    assert sample["resources"] == rendered["resources"]
    assert sample["service"] == rendered["service"]
