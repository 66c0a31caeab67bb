"""Shared pieces of the launchers: engine command lines, names, YAML, plan reading."""

from __future__ import annotations

import re

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
    with pytest.raises(InvalidInput, match="needs an image for"):
        EngineSettings(images={"vllm": "x"})


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
