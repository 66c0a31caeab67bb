"""A TensorRT-LLM rank as a SkyServe service: the NGC image, ``/health`` and a run script that
writes trtllm-serve's options file before it starts the server (loaded by the real SkyPilot in
``test_sky_yaml.py``)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from koi.catalog import load_catalog
from koi.errors import InvalidInput
from koi.integrations.engine import EngineSettings
from koi.integrations.render import to_yaml
from koi.integrations.skypilot import SkyPilotSettings, render_service_config
from koi.types import Chain, Config, Rank

CAT = load_catalog()
L40S = CAT.instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")


def test_a_trtllm_service_runs_trtllm_serve_from_the_ngc_image(tmp_path: Path) -> None:
    rank = Rank(Chain("Llama-3.1-8B", L40S, Config(engine="trtllm", tp=2, cuda_graphs=False)), 2)
    cfg = render_service_config("chat", rank, SkyPilotSettings(), CAT)
    assert cfg["resources"]["image_id"] == "docker:nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    assert cfg["resources"]["accelerators"] == "L40S:2"
    assert cfg["service"]["readiness_probe"]["path"] == "/health"
    # The YAML keeps the run script as written: one `sh -c` whose script is the command's.
    path = tmp_path / "service.yaml"
    path.write_text(to_yaml([cfg]))
    run = yaml.safe_load(path.read_text())["run"]
    shell, flag, script = shlex.split(run)
    assert (shell, flag) == ("sh", "-c")
    assert "cuda_graph_config: null" in script.splitlines()
    assert script.splitlines()[-1].startswith("exec trtllm-serve /tmp/koi-models/Llama-3.1-8B ")
    assert "meta-llama/Llama-3.1-8B /tmp/koi-models/Llama-3.1-8B" in script
    assert "--tp_size 2" in script


def test_a_quantized_trtllm_rank_needs_its_checkpoint() -> None:
    rank = Rank(Chain("Llama-3.1-8B", L40S, Config(engine="trtllm", quant="int4")), 1)
    with pytest.raises(InvalidInput, match=r"EngineSettings.checkpoints\['Llama-3.1-8B@int4'\]"):
        render_service_config("chat", rank, SkyPilotSettings(), CAT)
    awq = EngineSettings(checkpoints={"Llama-3.1-8B@int4": "org/Llama-3.1-8B-AWQ"})
    cfg = render_service_config("chat", rank, SkyPilotSettings(engine=awq), CAT)
    assert "org/Llama-3.1-8B-AWQ /tmp/koi-models/Llama-3.1-8B" in cfg["run"]
