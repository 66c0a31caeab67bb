"""The configuration examples in docs/operations.md are valid configuration."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from koi.agent import load_plugin, parse_config
from koi.integrations.prometheus import PrometheusTelemetry

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
TEXT = DOC.read_text(encoding="utf-8")


def _toml_blocks() -> list[str]:
    blocks = re.findall(r"```toml\n(.*?)```", TEXT, re.DOTALL)
    configmap = re.search(r"koi\.toml: \|\n(.*?)\n---", TEXT, re.DOTALL)
    assert configmap is not None
    blocks.append("\n".join(line[4:] for line in configmap.group(1).splitlines()))
    return blocks


@pytest.mark.parametrize("block", _toml_blocks())
def test_config_examples_parse_and_prometheus_tables_build(block: str) -> None:
    cfg = parse_config(tomllib.loads(block), source="doc")
    assert cfg.plugins
    for spec in cfg.plugins:
        if "prometheus" in spec.use:
            assert isinstance(load_plugin(spec, source="doc"), PrometheusTelemetry)


def test_the_agent_manifest_passes_strict_validation() -> None:
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("kubernetes_validate")
    from tests.integrations.kubernetes._schemas import VERSIONS, validate

    (manifest,) = re.findall(r"```yaml\n(.*?)```", TEXT, re.DOTALL)
    docs = list(yaml.safe_load_all(manifest))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "ConfigMap",
        "PersistentVolumeClaim",
        "Deployment",
        "ServiceAccount",
        "Service",
    ]
    for version in (VERSIONS[0], VERSIONS[-1]):
        for doc in docs:
            validate(doc, version)
    deployment = docs[2]
    assert deployment["spec"]["replicas"] == 1  # two planners must never run at once
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    config = tomllib.loads(docs[0]["data"]["koi.toml"])
    assert config["agent"]["host"] == "0.0.0.0"  # the kubelet's probes reach the pod's address
    assert str(config["agent"]["port"]) == str(container["ports"][0]["containerPort"])
