"""docs/integrations.md: the TensorRT-LLM command it shows is the one koi renders."""

from __future__ import annotations

import re
from pathlib import Path

from koi.catalog import load_catalog
from koi.integrations.engine import EngineSettings, engine_command
from koi.types import Chain, Config

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def test_the_trtllm_example_is_what_koi_renders() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    (shown,) = [b for b in blocks if "trtllm-serve" in b]
    env = load_catalog().instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")
    chain = Chain("Llama-3.1-8B", env, Config(engine="trtllm", tp=2, cuda_graphs=False))
    assert engine_command(chain, EngineSettings()) == ("sh", "-c", shown)
