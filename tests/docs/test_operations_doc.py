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
