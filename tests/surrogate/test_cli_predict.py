"""``koi predict`` end to end through :func:`koi.cli.main`."""

from __future__ import annotations

import json

import pytest

from koi.cli import main

REQUIRED = {
    "feasible",
    "reason",
    "p99_ttft_ms",
    "p50_ttft_ms",
    "p99_tpot_ms",
    "p50_tpot_ms",
    "throughput_tok_s",
    "kv_capacity_tokens",
    "mediators",
    "cost_per_mtok_usd",
}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["predict", *argv, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_json_has_every_field_and_a_price(capsys: pytest.CaptureFixture[str]) -> None:
    d = _run(
        capsys,
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "H100-SXM",
        "--tp",
        "1",
        "--isl",
        "1000",
        "--osl",
        "200",
        "--rate",
        "4",
    )
    assert set(d) >= REQUIRED
    assert d["feasible"] is True
    assert isinstance(d["cost_per_mtok_usd"], float)
    assert d["cost_per_mtok_usd"] > 0
    med = d["mediators"]
    assert isinstance(med, dict)
    assert len(med) == 11  # every mediator, prefix_hit_rate included
    assert d["throughput_tok_s"] == pytest.approx(800, rel=0.02)


def test_concurrency_replicas_and_quant(capsys: pytest.CaptureFixture[str]) -> None:
    shape = "--model Llama-3.1-70B --gpu H100-SXM --tp 4 --quant fp8 --isl 2000 --osl 300"
    one = _run(capsys, *shape.split(), "--concurrency", "32")
    two = _run(capsys, *shape.split(), "--concurrency", "64", "--replicas", "2")
    assert isinstance(one["throughput_tok_s"], float)
    assert isinstance(two["throughput_tok_s"], float)
    assert two["throughput_tok_s"] == pytest.approx(2 * one["throughput_tok_s"], rel=0.15)


def test_infeasible_reports_reason(capsys: pytest.CaptureFixture[str]) -> None:
    d = _run(
        capsys,
        "--model",
        "Llama-3.1-70B",
        "--gpu",
        "L40S",
        "--tp",
        "1",
        "--isl",
        "100",
        "--osl",
        "100",
        "--rate",
        "1",
    )
    assert d["feasible"] is False
    assert "weights" in str(d["reason"])
    assert d["p99_ttft_ms"] is None


def test_text_output_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "predict",
                "--model",
                "Llama-3.1-8B",
                "--gpu",
                "L4",
                "--tp",
                "1",
                "--isl",
                "500",
                "--osl",
                "100",
                "--rate",
                "1",
                "--analytic",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "p99_ttft_ms" in out
    assert "kv_cache_util" in out
    assert (
        main(
            [
                "predict",
                "--model",
                "nope",
                "--gpu",
                "L4",
                "--tp",
                "1",
                "--isl",
                "1",
                "--osl",
                "1",
                "--rate",
                "1",
            ]
        )
        == 2
    )
    assert "nope" in capsys.readouterr().err


_BASE = ("--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--tp", "1", "--isl", "2000")


def test_protocol_flags_change_the_mean(capsys: pytest.CaptureFixture[str]) -> None:
    burst = _run(capsys, *_BASE, "--osl", "200", "--concurrency", "64", "--length-spread", "0.2")
    steady = _run(
        capsys,
        *_BASE,
        "--osl",
        "200",
        "--concurrency",
        "64",
        "--length-spread",
        "0.2",
        "--steady-state",
    )
    assert {"mean_ttft_ms", "mean_tpot_ms"} <= set(burst)
    assert float(burst["mean_ttft_ms"]) > float(steady["mean_ttft_ms"])  # type: ignore[arg-type]
    imax = _run(capsys, *_BASE, "--osl", "200", "--concurrency", "8", "--protocol", "inferencemax")
    assert imax["feasible"] is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--rate", "2", "--length-spread", "0.2"), "need --concurrency"),
        (("--concurrency", "4", "--protocol", "locust"), "--protocol: must be one of"),
        (("--concurrency", "4", "--requests", "2"), "--requests: must be >="),
        (("--concurrency", "4", "--length-spread", "1.5"), "--length-spread: must be in"),
        (("--rate", "2", "--protocol", "inferencemax"), "needs --concurrency"),
    ],
)
def test_protocol_flags_bad_input_exit_2(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    assert main(["predict", *_BASE, "--osl", "100", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


_L4_8B = ["--model", "Llama-3.1-8B", "--gpu", "L4", "--tp", "1", "--isl", "500", "--osl", "100"]


def test_precisions_flag_prints_the_policy_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    int4 = [*_L4_8B, "--rate", "1", "--analytic", "--quant", "int4"]
    assert main(["predict", *int4, "--precisions", "bf16,fp8"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == (
        "infeasible for this job (C2): precision policy: int4 is outside the accepted "
        "precisions (bf16, fp8)"
    )
    assert "p99_tpot_ms" in text  # the prediction is still shown
    d = _run(capsys, *int4, "--precisions", "int4,bf16")
    assert d["precision_policy"] == {
        "precisions": ["bf16", "int4"],
        "accepted": True,
        "reason": None,
    }
    assert "precision_policy" not in _run(capsys, *int4)
    # An FP8 KV cache is an FP8 precision: refused for a BF16-only job, named as the KV cache.
    kv = [*_L4_8B, "--rate", "1", "--analytic", "--kv-cache-dtype", "fp8"]
    d = _run(capsys, *kv, "--precisions", "bf16")
    assert d["precision_policy"]["reason"] == (
        "precision policy: KV cache fp8 is outside the accepted precisions (bf16)"
    )
    assert _run(capsys, *kv, "--precisions", "bf16,fp8")["precision_policy"]["accepted"] is True


def test_bad_precisions_flag_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*_L4_8B, "--rate", "1", "--precisions", "bf16,int8"]
    assert main(["predict", *argv]) == 2
    assert "--precisions: must be a comma-separated list of bf16, fp8, int4" in (
        capsys.readouterr().err
    )
