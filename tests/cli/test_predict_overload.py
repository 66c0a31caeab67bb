"""``koi predict`` past saturation: an open loop never gets better as the rate rises, and a
closed loop's size is bounded before anything is built."""

from __future__ import annotations

import json

import pytest

from koi.catalog import load_catalog
from koi.cli import main
from koi.errors import InvalidInput
from koi.surrogate import MAX_CONCURRENCY, MAX_REQUESTS, LoadProtocol, predict_serving
from koi.types import Config

# The fuzzer's case: short requests, so a replay of 1,500 of them at a high rate spans a few
# microseconds (fewer than one engine step).
_SHAPE = ["--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--tp", "1", "--isl", "100"]
_OSL = 10


def _predict(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, float]:
    assert main(["predict", *_SHAPE, "--osl", str(_OSL), *argv, "--json"]) == 0
    data: dict[str, float] = json.loads(capsys.readouterr().out)
    return data


@pytest.mark.parametrize("replicas", ["1", "2"])
def test_open_loop_is_monotone_past_saturation(
    capsys: pytest.CaptureFixture[str], replicas: str
) -> None:
    capacity = _predict(capsys, "--replicas", replicas, "--rate", "1e9", "--analytic")
    sat_rps = capacity["throughput_tok_s"] / _OSL  # requests/s the closed form saturates at
    runs = [
        _predict(capsys, "--replicas", replicas, "--rate", str(sat_rps * f))
        for f in (1.0, 1.01, 10.0, 1000.0, 1e6)
    ]
    ttft = [r["p99_ttft_ms"] for r in runs]
    tput = [r["throughput_tok_s"] for r in runs]
    assert ttft == sorted(ttft), ttft
    assert tput == sorted(tput), tput
    # Throughput at capacity, not a window too short for one step (it read 0 tok/s).
    assert tput[-1] >= 0.9 * capacity["throughput_tok_s"]
    # The queue ages over the stated horizon (replay_horizon_s = 30 s): far past saturation
    # the p99 waits nearly all of it, close to the closed form's overloaded p99.
    analytic = _predict(capsys, "--replicas", replicas, "--rate", str(sat_rps * 1000), "--analytic")
    assert 25_000 < ttft[-2] < 2.0 * analytic["p99_ttft_ms"]


def test_below_saturation_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    # Under capacity the replay runs at the offered rate and serves all of it.
    d = _predict(capsys, "--rate", "100")
    assert d["throughput_tok_s"] == pytest.approx(100 * _OSL)
    assert d["p99_ttft_ms"] < 1_000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--concurrency", "100000000"), f"--concurrency: must be <= {MAX_CONCURRENCY}, got"),
        (
            ("--concurrency", "8", "--requests", "100000000"),
            f"--requests: must be <= {MAX_REQUESTS}, got",
        ),
    ],
)
def test_closed_loop_size_is_bounded(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    assert main(["predict", *_SHAPE, "--osl", str(_OSL), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("koi predict: error: ")
    assert message in err


def test_concurrency_at_the_bound_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    d = _predict(capsys, "--concurrency", str(MAX_CONCURRENCY), "--analytic")
    assert d["feasible"] is True


def test_the_closed_form_is_monotone_past_saturation(capsys: pytest.CaptureFixture[str]) -> None:
    # Long prompts on two L40S: the closed form aged its queue over a horizon that shrank with
    # the rate, and its p99 TTFT fell from 411 s at twice the saturation rate to 22 s.
    shape = ["--model", "Llama-3.1-8B", "--gpu", "L40S", "--tp", "2", "--isl", "12000"]
    ttft = []
    for rate in ("2", "20", "2000", "2e6"):
        assert (
            main(["predict", *shape, "--osl", "1000", "--rate", rate, "--analytic", "--json"]) == 0
        )
        ttft.append(json.loads(capsys.readouterr().out)["p99_ttft_ms"])
    assert ttft == sorted(ttft), ttft


def test_the_python_api_bounds_a_closed_loop_as_the_command_line_does() -> None:
    # Only the command line checked: predict_serving(concurrency=10**8) ran out of memory.
    cat = load_catalog()
    gpu, model = cat.gpus["H100-SXM"], cat.models["Llama-3.1-8B"]
    with pytest.raises(InvalidInput, match=rf"^concurrency: must be <= {MAX_CONCURRENCY}, got"):
        predict_serving(gpu, model, Config(), isl=100, osl=10, concurrency=MAX_CONCURRENCY + 1)
    with pytest.raises(InvalidInput, match=rf"^request_count: must be <= {MAX_REQUESTS}, got"):
        LoadProtocol(concurrency=8, request_count=MAX_REQUESTS + 1)
    largest = LoadProtocol(concurrency=MAX_CONCURRENCY, request_count=MAX_REQUESTS)
    assert largest.requests == MAX_REQUESTS
