"""The optional aiconfigurator-core backend (skipped without the ``aic`` extra)."""

from __future__ import annotations

import pytest
from tests._support.specs import gpus, models

pytest.importorskip("aiconfigurator_core")

from koi.surrogate import (
    AicProfiles,
    OperatorModel,
    Surrogate,
    SurrogateConfig,
    predict_serving,
)
from koi.surrogate._aic import AicStepModel
from koi.types import Config


@pytest.fixture(scope="module")
def aic() -> AicProfiles:
    return AicProfiles()


def test_covered_pairs_use_measured_step_times(aic: AicProfiles) -> None:
    g, m = gpus()["H100-SXM"], models()["Llama-3.1-8B"]
    assert aic.covers(g, m)
    step = aic.step_model(g, m, Config())
    assert isinstance(step, AicStepModel)
    small = step.step(prefill_tokens=0, prefill_pairs=0, decode_seqs=1, decode_context_tokens=1000)
    big = step.step(
        prefill_tokens=0, prefill_pairs=0, decode_seqs=128, decode_context_tokens=128000
    )
    assert 1e-3 < small.time_s < big.time_s < 0.2
    # Within a factor of two of the built-in model: both describe the same hardware.
    ours = OperatorModel(g, m, Config()).step(
        prefill_tokens=0, prefill_pairs=0, decode_seqs=1, decode_context_tokens=1000
    )
    assert 0.5 < small.time_s / ours.time_s < 2.0
    pre = step.step(
        prefill_tokens=2048, prefill_pairs=2048 * 1024, decode_seqs=4, decode_context_tokens=4000
    )
    assert pre.time_s > small.time_s
    assert pre.compute_s > 0
    assert pre.memory_s > 0


def test_uncovered_gpu_falls_back_and_uncovered_model_is_substituted(aic: AicProfiles) -> None:
    assert not aic.covers(gpus()["L4"], models()["Llama-3.1-8B"])
    assert isinstance(
        aic.step_model(gpus()["L4"], models()["Llama-3.1-8B"], Config()), OperatorModel
    )
    # int4 is not in aiconfigurator's quant modes here: built-in model.
    assert isinstance(
        aic.step_model(gpus()["H100-SXM"], models()["Llama-3.1-8B"], Config(quant="int4")),
        OperatorModel,
    )
    p = predict_serving(
        gpus()["H100-SXM"],
        models()["Phi-4"],
        Config(),
        isl=1000,
        osl=200,
        concurrency=8,
        profiles=aic,
        candidates=models().values(),
        replay=False,
    )
    assert p.feasible
    assert p.substituted_from is not None


def test_surrogate_same_api_with_aic(aic: AicProfiles) -> None:
    from test_predict import _ladder, _online

    sur = Surrogate(gpus(), models(), SurrogateConfig(use_replay=False), profiles=aic)
    pred = sur.predict(_online(), _ladder(("H100-SXM", 1, 1)))
    assert pred.feasible
    assert pred.substituted_from is None
    assert pred.outcomes.p99_tpot_ms > 0
