"""Accuracy against public measurements (docs/surrogate.md, "Accuracy").

The held-out split is aiconfigurator-core's silicon sample; no constant was fitted on it.  Each
row is predicted under its source's load protocol (data/protocols.csv) and compared mean to mean.
"""

from __future__ import annotations

import statistics

import pytest
from tests._support.accuracy import median_ape, rows
from tests._support.specs import gpus, models

from koi.surrogate import OperatorModel, SurrogateConfig
from koi.types import Config

# Issue 4 targets (median APE, %): TPOT and throughput 25, TTFT 50.
TARGET = {"tpot_ms": 25.0, "throughput_tok_s": 25.0, "ttft_ms": 50.0}
# Issue 22: every held-out row scored with its engine and its source's protocol, mean vs mean.
REPLAY_TTFT_TARGET = 40.0


def test_fixture_covers_three_gpus_and_three_models_with_sources() -> None:
    data = rows()
    assert len({r["gpu"] for r in data}) >= 3
    assert len({r["model"] for r in data}) >= 3
    assert all(r["source"] for r in data)
    assert {r["split"] for r in data} == {"fit", "heldout"}
    # The fit split alone spans H100 (NIM docs), MI300X (OCI blog) and A100 (NVIDIA DLI dataset).
    assert len({r["gpu"] for r in rows("fit")}) >= 3


def test_heldout_error_of_koi_predict_replay() -> None:
    ape = median_ape(rows("heldout"), SurrogateConfig(), replay=True)
    for key, limit in TARGET.items():
        assert ape[key] <= limit, (key, ape[key])
    assert ape["ttft_ms"] <= REPLAY_TTFT_TARGET, ape["ttft_ms"]


def test_heldout_error_of_closed_form_screen_within_all_targets() -> None:
    ape = median_ape(rows("heldout"), SurrogateConfig(), replay=False)
    for key, limit in TARGET.items():
        assert ape[key] <= limit, (key, ape[key])


@pytest.mark.parametrize("replay", [True, False])
def test_fit_split_tpot_and_throughput_within_targets(replay: bool) -> None:
    ape = median_ape(rows("fit"), SurrogateConfig(), replay=replay)
    assert ape["tpot_ms"] <= TARGET["tpot_ms"]
    assert ape["throughput_tok_s"] <= TARGET["throughput_tok_s"]


def test_fit_split_h100_single_sequence_decode_step() -> None:
    """At concurrency 1 the measured inter-token latency is one decode step of one sequence at
    context ISL + OSL/2.  The fit split's H100 rows (DLI nim.csv Llama-3-70B TP 4/8, FP16 and
    FP8; NIM TP 2) are what the Hopper decode terms were fitted on (benchmarks/fit_decode.py);
    with the NVIDIA priors alone the median error was 20 % and the context slope missing."""
    cfg = SurrogateConfig()
    data = [r for r in rows("fit") if r["gpu"] == "H100-SXM" and r["concurrency"] == "1"]
    assert len(data) == 25
    ape = []
    for r in data:
        config = Config(engine=r["engine"], tp=int(r["tp"]), quant=r["quant"])
        op = OperatorModel(gpus()[r["gpu"]], models()[r["model"]], config, cfg=cfg)
        ctx = int(r["isl"]) + int(r["osl"]) // 2
        step = op.step(
            prefill_tokens=0, prefill_pairs=0.0, decode_seqs=1, decode_context_tokens=ctx
        )
        ape.append(abs(step.time_s * 1e3 / float(r["tpot_ms"]) - 1.0) * 100.0)
    assert statistics.median(ape) <= 8.0
