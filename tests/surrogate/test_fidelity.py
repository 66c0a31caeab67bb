"""Mechanisms of surrogate fidelity on commodity GPUs (issue 16, docs/surrogate.md).

Interconnect per instance (NVLink, PCIe with and without peer-to-peer), the collective model's
fit on measured NCCL tables, memory as the device reports it, engine settings (eager mode,
memory utilisation, max model length), pipeline-parallel TTFT and overload collapse.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import attrs
import pytest
from tests._support.specs import gpus, models

from koi.cli import main
from koi.surrogate import OperatorModel, SurrogateConfig, feasibility, predict_serving
from koi.types import Config, Environment, LinkKind

NCCL = Path(__file__).parent / "data" / "nccl_allreduce.csv"


def _env(link: str) -> Environment:
    return Environment("aws", "r", "on_demand", "node", "L40S", 8, 30.0, link=link)


def test_collective_model_reproduces_the_measured_nccl_tables() -> None:
    # The fit split of the collective model: aiconfigurator-core's NCCL all-reduce tables.
    cfg = SurrogateConfig()
    err: dict[str, list[float]] = defaultdict(list)
    with NCCL.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            fixed, per_byte = cfg.collective(r["link"]).allreduce_terms(
                int(r["gpus"]), float(r["link_gb_s"]) * 1e9
            )
            pred = fixed + per_byte * 2.0 * float(r["elements"])
            truth = float(r["latency_ms"]) * 1e-3
            err[r["link"]].append(abs(pred - truth) / truth)
    assert set(err) == {"nvlink", "pcie", "pcie_no_p2p"}
    for kind in ("pcie", "pcie_no_p2p"):  # fitted; NVLink keeps its custom-all-reduce prior
        e = err[kind]
        assert statistics.median(e) < 0.25, (kind, statistics.median(e))


def test_pcie_without_p2p_decodes_slower_at_tp8_than_with_p2p() -> None:
    model, gpu = models()["Llama-3.1-8B"], gpus()["L40S"]

    def tpot(link: str) -> float:
        p = predict_serving(
            gpu, model, Config(tp=8), isl=1000, osl=200, concurrency=16, environment=_env(link)
        )
        return p.p50_tpot_ms

    assert tpot("pcie_no_p2p") > 1.5 * tpot("pcie")
    # The operator model alone: the all-reduce of a 64-sequence decode step.
    step = {
        link: OperatorModel(attrs.evolve(gpu, link=LinkKind(link)), model, Config(tp=8)).step(
            prefill_tokens=0, prefill_pairs=0, decode_seqs=64, decode_context_tokens=64000
        )
        for link in ("pcie", "pcie_no_p2p", "nvlink")
    }
    assert step["pcie_no_p2p"].comm_s > 3 * step["pcie"].comm_s > step["nvlink"].comm_s


def test_instance_interconnect_reaches_the_prediction() -> None:
    from koi.catalog import load_catalog

    cat = load_catalog()
    g6e = cat.instance("aws", "g6e.48xlarge").environments()[0]
    onprem = cat.instance("onprem", "onprem-l40s-4").environments()[0]
    assert g6e.link is LinkKind.PCIE_NO_P2P
    assert g6e.link_gb_s == 32.0
    assert onprem.link is LinkKind.PCIE
    model, gpu = models()["Llama-3.1-8B"], gpus()["L40S"]
    args = {"isl": 1000, "osl": 200, "concurrency": 16}
    slow = predict_serving(gpu, model, Config(tp=4), environment=g6e, **args)
    fast = predict_serving(gpu, model, Config(tp=4), environment=onprem, **args)
    assert slow.throughput_tok_s < fast.throughput_tok_s


def test_eager_mode_raises_small_batch_tpot() -> None:
    model, gpu = models()["Llama-3.1-8B"], gpus()["H100-SXM"]

    def tpot(*, graphs: bool, conc: int) -> float:
        cfg = Config(cuda_graphs=graphs)
        return predict_serving(gpu, model, cfg, isl=500, osl=200, concurrency=conc).p50_tpot_ms

    assert tpot(graphs=False, conc=1) > 1.15 * tpot(graphs=True, conc=1)
    # Large batches hide the CPU launches behind the GPU work.
    assert tpot(graphs=False, conc=128) < 1.1 * tpot(graphs=True, conc=128)


def test_pipeline_ttft_exceeds_the_perfectly_pipelined_estimate() -> None:
    model, gpu = models()["Llama-3.1-70B"], gpus()["H100-SXM"]
    one = OperatorModel(gpu, model, Config(tp=2, pp=1, quant="fp8"))
    four = OperatorModel(gpu, model, Config(tp=2, pp=4, quant="fp8"))
    shape = {"prefill_tokens": 4000, "prefill_pairs": 8e6, "decode_seqs": 0}
    lone_1 = one.step(**shape, decode_context_tokens=0)
    lone_4 = four.step(**shape, decode_context_tokens=0)
    # A lone prompt traverses the four stages one after another: no 4x speed-up.
    assert lone_4.compute_s == pytest.approx(lone_1.compute_s, rel=1e-9)
    assert lone_4.time_s > lone_1.time_s
    # With a full pipeline (many sequences) the stages overlap.
    busy = {"prefill_tokens": 0, "prefill_pairs": 0.0, "decode_seqs": 64}
    assert (
        four.step(**busy, decode_context_tokens=64000).compute_s
        < 0.7 * one.step(**busy, decode_context_tokens=64000).compute_s
    )
    pred = predict_serving(
        gpu, model, Config(tp=2, pp=4, quant="fp8"), isl=4000, osl=50, concurrency=1
    )
    base = predict_serving(gpu, model, Config(tp=2, quant="fp8"), isl=4000, osl=50, concurrency=1)
    assert pred.p50_ttft_ms > base.p50_ttft_ms / 4 * 2


@pytest.mark.parametrize("replay", [True, False])
def test_closed_loop_past_kv_capacity_collapses_throughput(replay: bool) -> None:
    model, gpu = models()["Llama-3.1-8B"], gpus()["L40S"]

    def tput(conc: int) -> float:
        p = predict_serving(
            gpu, model, Config(), isl=12000, osl=1000, concurrency=conc, replay=replay
        )
        return p.throughput_tok_s

    kv = feasibility(gpu, model, Config()).kv_capacity_tokens
    fits = kv // 13000  # clients whose whole requests the KV cache holds
    assert 8 < fits < 32
    assert tput(64) < 0.9 * tput(fits)


def test_a_max_length_request_that_does_not_fit_is_infeasible_with_a_reason() -> None:
    model, gpu = models()["Llama-3.1-8B"], gpus()["L4"]
    pred = predict_serving(
        gpu, model, Config(max_model_len=131072), isl=1000, osl=200, concurrency=4
    )
    assert not pred.feasible
    assert "max model length 131072" in pred.reason
    assert "refuses to start" in pred.reason
    ok = predict_serving(gpu, model, Config(max_model_len=8192), isl=1000, osl=200, concurrency=4)
    assert ok.feasible
    assert ok.throughput_tok_s > 0
    # The job's own longest request decides when max_model_len is not set.
    long = predict_serving(gpu, model, Config(), isl=120000, osl=1000, concurrency=1)
    assert not long.feasible
    assert "max model length 121000" in long.reason


def test_kv_capacity_uses_reported_memory_and_the_engine_utilisation() -> None:
    model, gpu = models()["Llama-3.1-8B"], gpus()["L40S"]
    assert gpu.device_memory_gib < gpu.memory_gib
    base = feasibility(gpu, model, Config())
    less = feasibility(gpu, model, Config(gpu_memory_utilization=0.8))
    eager = feasibility(gpu, model, Config(cuda_graphs=False))
    assert less.kv_capacity_tokens < base.kv_capacity_tokens < eager.kv_capacity_tokens
    nominal = feasibility(attrs.evolve(gpu, usable_memory_gib=None), model, Config())
    assert nominal.kv_capacity_tokens > base.kv_capacity_tokens


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--concurrency", "0", "--concurrency: must be an integer >= 1, got 0"),
        ("--concurrency", "-3", "--concurrency: must be an integer >= 1, got -3"),
        ("--engine", "foo", "--engine: must be one of vllm, sglang, trtllm, got 'foo'"),
    ],
)
def test_predict_bad_input_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, says: str
) -> None:
    argv = ["predict", "--model", "Llama-3.1-8B", "--gpu", "L4", "--tp", "1"]
    argv += ["--isl", "100", "--osl", "10"]
    argv += [flag, value] if flag == "--concurrency" else [flag, value, "--concurrency", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"koi predict: error: {says}"]


def test_predict_reports_infeasible_max_length_with_its_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["predict", "--model", "Llama-3.1-8B", "--gpu", "L4", "--tp", "1", "--isl", "1000"]
    argv += ["--osl", "100", "--concurrency", "2", "--max-model-len", "131072"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("infeasible: KV cache holds")
