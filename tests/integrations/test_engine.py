"""Shared pieces of the launchers: engine command lines, names, YAML, plan reading."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.catalog import load_catalog, model_sources
from koi.errors import InvalidInput
from koi.integrations.engine import (
    EngineSettings,
    chain_key,
    dns_label,
    engine_command,
    label_value,
    multi_node_commands,
    workload_name,
)
from koi.integrations.render import read_plan, to_yaml
from koi.types import Chain, Config, JobAction, Ladder, Plan, Rank, to_data

ENV = load_catalog().instance("aws", "g6e.12xlarge").environment("us-east-1", "on_demand")


def chain(**config: object) -> Chain:
    return Chain("Llama-3.1-8B", ENV, Config(**config))  # type: ignore[arg-type]


def test_every_builtin_model_has_a_checkpoint() -> None:
    sources = model_sources()
    assert set(sources) == set(load_catalog().models)
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", repo) for repo in sources.values())


def test_vllm_and_sglang_flags() -> None:
    cmd = engine_command(
        chain(tp=2, pp=2, max_batch_size=32, max_batched_tokens=4096), EngineSettings()
    )
    assert cmd[:3] == ("vllm", "serve", "meta-llama/Llama-3.1-8B")
    pairs = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert pairs["--tensor-parallel-size"] == "2"
    assert pairs["--pipeline-parallel-size"] == "2"
    assert pairs["--max-num-seqs"] == "32"
    assert pairs["--max-num-batched-tokens"] == "4096"
    sgl = engine_command(
        chain(engine="sglang", quant="fp8", gpu_memory_utilization=0.85), EngineSettings()
    )
    assert "--mem-fraction-static" in sgl
    assert sgl[sgl.index("--mem-fraction-static") + 1] == "0.85"
    assert sgl[-2:] == ("--quantization", "fp8")
    int4 = engine_command(chain(engine="sglang", quant="int4"), EngineSettings())
    assert int4[-2:] == ("--torchao-config", "int4wo-128")


def test_the_engine_knobs_of_the_config_become_flags() -> None:
    knobs = {
        "cuda_graphs": False,
        "chunked_prefill": False,
        "max_model_len": 16384,
        "kv_cache_dtype": "fp8",
    }
    vllm = " ".join(engine_command(chain(**knobs), EngineSettings()))
    for flag in (
        "--enforce-eager",
        "--no-enable-chunked-prefill",
        "--max-model-len 16384",
        "--kv-cache-dtype fp8",
    ):
        assert flag in vllm
    sgl = " ".join(engine_command(chain(engine="sglang", **knobs), EngineSettings()))
    for flag in (
        "--disable-cuda-graph",
        "--chunked-prefill-size -1",
        "--context-length 16384",
        "--kv-cache-dtype fp8_e4m3",
    ):
        assert flag in sgl
    default = " ".join(engine_command(chain(), EngineSettings()))
    assert "--enable-chunked-prefill" in default
    assert "--enforce-eager" not in default
    assert "--max-model-len" not in default


def test_checkpoints_and_extra_args() -> None:
    eng = EngineSettings(
        checkpoints={"Llama-3.1-8B": "meta-llama/Llama-3.1-8B-Instruct"},
        extra_args=("--enable-prefix-caching",),
    )
    cmd = engine_command(chain(), eng)
    assert cmd[2] == "meta-llama/Llama-3.1-8B-Instruct"
    assert cmd[-1] == "--enable-prefix-caching"
    custom = Chain("my-model", ENV, Config())
    with pytest.raises(InvalidInput, match=r"model 'my-model' has no checkpoint"):
        engine_command(custom, EngineSettings())
    with pytest.raises(InvalidInput, match=r"images\['tgi'\]: must be an image for one of"):
        EngineSettings(images={"tgi": "x"})


def test_multi_node_commands_need_two_nodes() -> None:
    with pytest.raises(InvalidInput, match="at least 2 nodes"):
        multi_node_commands(chain(tp=4), EngineSettings(), 1)


@given(st.text(min_size=1, max_size=80).filter(lambda s: s == s.strip()))
def test_names_are_valid_kubernetes_names_and_labels(job_id: str) -> None:
    name = workload_name(job_id, chain())
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert len(name) <= 63
    value = label_value(job_id)
    assert len(value) <= 63
    assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)


def test_names_keep_distinct_jobs_apart() -> None:
    assert dns_label("Chat", max_len=30) != dns_label("chat", max_len=30)
    assert label_value("a/b") != label_value("a-b")
    assert chain_key(chain(tp=1)) != chain_key(chain(tp=2))
    assert workload_name("chat", chain()) == workload_name("chat", chain())


def test_yaml_has_no_aliases_and_scripts_are_blocks() -> None:
    shared = {"path": "/health"}
    text = to_yaml([{"a": shared, "b": shared, "run": "echo hi\n"}])
    assert "&" not in text
    assert "*" not in text
    assert "run: |\n  echo hi\n" in text


def test_read_plan_accepts_both_shapes() -> None:
    ladder = Ladder((Rank(chain(), 2),))
    plan = Plan(5.0, [JobAction("chat", "place", ladder), JobAction("b", "defer")])
    assert read_plan(to_data(plan)) == plan
    cli_shape = {
        "time_s": 5.0,
        "jobs": [
            {"job_id": "chat", "action": "place", "ladder": to_data(ladder), "reason": ""},
            {"job_id": "b", "action": "defer", "ladder": {"ranks": []}, "reason": None},
        ],
    }
    assert read_plan(cli_shape) == plan
    bad = {
        "jobs": [
            {
                "job_id": "x",
                "action": "place",
                "ladder": {"ranks": [dict(to_data(Rank(chain(), 1)), replicas=0)]},
            }
        ]
    }
    with pytest.raises(InvalidInput, match=r"plan: jobs\[0\]: .*replicas"):
        read_plan(bad)


# -- TensorRT-LLM -----------------------------------------------------------------------------


def _trtllm(cmd: tuple[str, ...]) -> tuple[str, dict[str, Any], list[str]]:
    """A trtllm command's parts: the options file, its YAML (parsed) and trtllm-serve's argv."""
    yaml = pytest.importorskip("yaml")
    assert cmd[:2] == ("sh", "-c")
    lines = cmd[2].splitlines()
    assert lines[0] == "set -e"
    head = re.fullmatch(r"cat > (\S+) <<\\KOI_EOF", lines[1])
    assert head is not None, lines[1]
    end = lines.index("KOI_EOF")
    options = yaml.safe_load("\n".join(lines[2:end]))
    mkdir, _, exec_line = lines[end + 1 :]
    assert mkdir == "mkdir -p /tmp/koi-models"
    argv = shlex.split(exec_line)
    assert argv[:2] == ["exec", "trtllm-serve"]
    return head.group(1), options, argv[2:]


def _fetch(cmd: tuple[str, ...]) -> list[str]:
    """How a trtllm command puts the checkpoint where it is served from."""
    return shlex.split(cmd[2].splitlines()[-2])


def _flags(argv: list[str]) -> dict[str, str | None]:
    """``--name value`` pairs and ``--switch`` (None) of an argv after its positional model."""
    out: dict[str, str | None] = {}
    for k, arg in enumerate(argv):
        if arg.startswith("--"):
            value = argv[k + 1] if k + 1 < len(argv) else None
            out[arg] = None if value is None or value.startswith("--") else value
    return out


def test_trtllm_serve_flags_carry_the_config() -> None:
    cmd = engine_command(
        chain(
            engine="trtllm",
            tp=2,
            pp=2,
            max_batch_size=64,
            max_batched_tokens=4096,
            gpu_memory_utilization=0.85,
        ),
        EngineSettings(port=9000),
    )
    path, options, argv = _trtllm(cmd)
    # Served from a directory named after the model: 1.2.1 answers to the directory's name.
    assert argv[0] == "/tmp/koi-models/Llama-3.1-8B"
    fetch = _fetch(cmd)
    assert fetch[:2] == ["python3", "-c"]
    assert "snapshot_download" in fetch[2]
    assert fetch[3:] == ["meta-llama/Llama-3.1-8B", "/tmp/koi-models/Llama-3.1-8B"]
    flags = _flags(argv[1:])
    assert flags == {
        "--backend": "pytorch",
        "--host": "0.0.0.0",
        "--port": "9000",
        "--tp_size": "2",
        "--pp_size": "2",
        "--max_batch_size": "64",
        "--max_num_tokens": "4096",
        "--kv_cache_free_gpu_memory_fraction": "0.85",
        "--enable_chunked_prefill": None,  # Config's default; trtllm-serve's is off
        "--extra_llm_api_options": path,
    }
    # The defaults need no YAML knob but the one that mounts /prometheus/metrics.
    assert options == {"return_perf_metrics": True}


def test_trtllm_knobs_without_a_flag_go_to_the_options_file() -> None:
    knobs = {
        "cuda_graphs": False,
        "chunked_prefill": False,
        "max_model_len": 16384,
        "kv_cache_dtype": "fp8",
        "gpu_memory_utilization": 0.8,
    }
    _, options, argv = _trtllm(engine_command(chain(engine="trtllm", **knobs), EngineSettings()))
    flags = _flags(argv[1:])
    assert flags["--max_seq_len"] == "16384"
    assert "--enable_chunked_prefill" not in flags
    assert options == {
        "return_perf_metrics": True,
        "cuda_graph_config": None,  # eager mode
        # the block replaces the KV-cache config the flags built: it repeats the fraction
        "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.8},
    }


@pytest.mark.parametrize("quant", ["fp8", "int4"])
def test_trtllm_serves_fp8_and_int4_only_from_a_prequantized_checkpoint(quant: str) -> None:
    key = f"Llama-3.1-8B@{quant}"
    for settings in (
        EngineSettings(),
        EngineSettings(checkpoints={"Llama-3.1-8B": "meta-llama/Llama-3.1-8B-Instruct"}),
    ):
        with pytest.raises(InvalidInput) as info:
            engine_command(chain(engine="trtllm", quant=quant), settings)
        message = str(info.value)
        assert f"model 'Llama-3.1-8B' at {quant}" in message
        assert f"EngineSettings.checkpoints['{key}']" in message
        assert f"--checkpoint {key}=REPO" in message
    quantized = EngineSettings(checkpoints={key: "org/Llama-3.1-8B-quantized"})
    cmd = engine_command(chain(engine="trtllm", quant=quant), quantized)
    _, options, argv = _trtllm(cmd)
    assert _fetch(cmd)[3] == "org/Llama-3.1-8B-quantized"
    assert not any("quant" in a for a in argv[1:])  # the checkpoint says how it is quantized
    assert options == {"return_perf_metrics": True}


def _fake(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / name
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)


def test_the_trtllm_script_writes_its_options_then_execs_the_server(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "trtllm-serve", 'printf "%s\\n" "$@" > "$KOI_ARGS"')
    checkpoint = tmp_path / "my llama"  # a space survives the quoting
    checkpoint.mkdir()
    settings = EngineSettings(
        checkpoints={"Llama-3.1-8B": str(checkpoint)}, extra_args=("--log_level", "info")
    )
    cmd = engine_command(chain(engine="trtllm", cuda_graphs=False), settings)
    path, options, argv = _trtllm(cmd)
    shells = [s for s in ("sh", "bash", "dash") if shutil.which(s)]
    assert shells
    for shell in shells:
        written = tmp_path / f"{shell}.yaml"
        args = tmp_path / f"{shell}.args"
        models = tmp_path / f"{shell}-models"
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KOI_ARGS": str(args)}
        script = cmd[2].replace(path, str(written)).replace("/tmp/koi-models", str(models))
        subprocess.run([shell, "-c", script], env=env, check=True, timeout=30)
        assert yaml.safe_load(written.read_text()) == options
        served = args.read_text().splitlines()
        assert served[1:] == [a.replace(path, str(written)) for a in argv[1:]]
        # The server loads the checkpoint through a directory named after the model.
        assert served[0] == str(models / "Llama-3.1-8B")
        assert Path(served[0]).resolve() == checkpoint
        assert served[-2:] == ["--log_level", "info"]


def test_a_failed_fetch_does_not_start_the_trtllm_server(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "trtllm-serve", 'touch "$KOI_ARGS"')
    _fake(bin_dir, "python3", "exit 1")  # the Hugging Face download fails
    started = tmp_path / "started"
    cmd = engine_command(chain(engine="trtllm"), EngineSettings())
    path, _, _ = _trtllm(cmd)
    script = cmd[2].replace(path, str(tmp_path / "o.yaml"))
    script = script.replace("/tmp/koi-models", str(tmp_path / "models"))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KOI_ARGS": str(started)}
    done = subprocess.run(["sh", "-c", script], env=env, timeout=30, check=False)
    assert done.returncode != 0
    assert not started.exists()


def test_a_trtllm_model_name_must_name_a_directory() -> None:
    custom = Chain("org/my-model", ENV, Config(engine="trtllm"))
    settings = EngineSettings(checkpoints={"org/my-model": "org/my-model"})
    with pytest.raises(InvalidInput, match="name the model without '/'"):
        engine_command(custom, settings)


def test_multi_node_trtllm_is_refused() -> None:
    with pytest.raises(InvalidInput, match="koi does not render multi-node TensorRT-LLM"):
        multi_node_commands(chain(engine="trtllm", tp=8), EngineSettings(), 2)


def test_every_engine_has_a_default_image_that_settings_may_override() -> None:
    images = EngineSettings().images
    assert set(images) == {"vllm", "sglang", "trtllm"}
    assert images["trtllm"] == "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    # Settings written before TensorRT-LLM was added keep working, with its default image.
    mine = EngineSettings(images={"vllm": "v", "sglang": "s"})
    assert mine.image("vllm") == "v"
    assert mine.image("trtllm") == images["trtllm"]
    with pytest.raises(InvalidInput, match=r"images\['sglang'\]: must be an image"):
        EngineSettings(images={"sglang": ""})
