"""``step_parts`` (the fast path the closed form and the step-time cache read) gives exactly the
fields ``step`` gives, for every step model that offers it and through ``parts_of`` for one that
does not."""

from __future__ import annotations

import math
import random

import pytest
from tests._support.specs import gpus, models

from koi.surrogate import (
    MemoStepModel,
    OperatorModel,
    ScaledStepCache,
    ScaledStepModel,
    Surrogate,
)
from koi.surrogate.replay import (
    CachedStepModel,
    StepTime,
    StepTimeModel,
    parts_of,
    parts_time,
)
from koi.types import Config, Quant

_FIELDS = ("compute_s", "memory_s", "comm_s", "bubble_s", "overhead_s")


class _StepOnly:
    """A plugin's step model: ``step`` and nothing else."""

    def step(
        self,
        *,
        prefill_tokens: int,
        prefill_pairs: float,
        decode_seqs: int,
        decode_context_tokens: int,
    ) -> StepTime:
        return StepTime(
            compute_s=1e-6 * prefill_tokens + 1e-9 * prefill_pairs,
            memory_s=0.004 + 1e-8 * decode_context_tokens,
            comm_s=1e-5 * decode_seqs,
            overhead_s=0.001,
        )


def _fields(st: StepTime) -> tuple[float, ...]:
    return (st.compute_s, st.memory_s, st.comm_s, st.bubble_s, st.overhead_s)


def _bases() -> list[StepTimeModel]:
    sur = Surrogate(gpus(), models())
    g, m = sur.gpus, sur.models
    out: list[StepTimeModel] = [_StepOnly()]
    for gpu, model, config in (
        ("H100-SXM", "Llama-3.1-70B", Config(tp=4, quant=Quant.FP8)),
        ("A100-80GB", "Mixtral-8x7B", Config(tp=2, pp=2)),
        ("L40S", "Qwen3-8B", Config(tp=1, quant=Quant.INT4)),
    ):
        out.append(sur.step_model(g[gpu], m[model], config)[0])
    return out


def _batches() -> list[tuple[int, float, int, int]]:
    rng = random.Random(7)
    out = [(0, 0.0, 0, 0), (512, 0.0, 0, 0), (0, 0.0, 1, 900)]
    for _ in range(60):
        t = rng.choice([0, 1, 17, 256, 2048, 8192])
        n = rng.choice([0, 1, 3, 64, 255])
        out.append((t, t * rng.uniform(0.0, 12_000.0), n, n * rng.randint(0, 20_000)))
    return out * 2  # twice: memoized answers too


def _step(model: StepTimeModel, t: int, p: float, n: int, c: int) -> StepTime:
    return model.step(prefill_tokens=t, prefill_pairs=p, decode_seqs=n, decode_context_tokens=c)


def test_parts_of_a_model_without_step_parts_unpacks_its_step() -> None:
    model = _StepOnly()
    assert not hasattr(model, "step_parts")
    parts = parts_of(model)
    for t, p, n, c in _batches():
        got = parts(t, p, n, c)
        assert got == _fields(_step(model, t, p, n, c))
        assert parts_time(got) == _step(model, t, p, n, c).time_s


def test_operator_step_parts_are_its_breakdown_summed() -> None:
    """The operator's fast path against its per-operation breakdown (built separately)."""
    for model in _bases()[1:]:
        assert isinstance(model, OperatorModel)
        for t, p, n, c in _batches():
            ops = model.breakdown(
                prefill_tokens=t, prefill_pairs=p, decode_seqs=n, decode_context_tokens=c
            )
            want = [math.fsum(getattr(x, f) for x in ops.values()) for f in _FIELDS]
            got = model.step_parts(t, p, n, c)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_scaled_and_memoized_parts_scale_the_base_steps() -> None:
    """A corrected model's parts are its base's ``StepTime`` scaled by the documented factor
    (decode time ``d``, what prefill adds ``p``); a memo's are its model's, also past its
    limit."""
    d, p_f = 0.85, 1.3
    for base in _bases():
        scaled = ScaledStepModel(base, prefill=p_f, decode=d)
        over_memo = ScaledStepModel(MemoStepModel(base, None), prefill=p_f, decode=d)
        memo = MemoStepModel(base, 8)
        for t, p, n, c in _batches():
            full = _step(base, t, p, n, c)
            if t == 0:
                f = d
            elif n == 0:
                f = p_f
            else:
                dec = _step(base, 0, 0.0, n, c).time_s
                f = (d * dec + p_f * max(full.time_s - dec, 0.0)) / full.time_s
            want = _fields(full.scaled(compute=f, memory=f, comm=f, bubble=f, overhead=f))
            assert scaled.step_parts(t, p, n, c) == want
            assert over_memo.step_parts(t, p, n, c) == want
            assert _fields(_step(scaled, t, p, n, c)) == want
            assert memo.step_parts(t, p, n, c) == _fields(full)


def test_a_correction_read_through_the_base_cache_is_the_corrected_step() -> None:
    """Corrected replays share one step-time cache per uncorrected model and read it through
    the correction (``ScaledStepCache``): the corrected model's step, off only by the cache's
    own interpolation between prefill-token and sequence nodes (exact where the model is
    affine in pairs and context, as most are).  A cache of the corrected model itself, which
    replays used before, fits a step that is not affine in them under unequal factors: off by
    10–74 % at some of these shapes (docs/surrogate.md)."""
    worst_before = 0.0
    for base in _bases():
        cache = CachedStepModel(base)
        parts = parts_of(base)
        for p_f, d in ((0.7, 1.4), (2.5, 1.1), (1.3, 1.3)):
            exact = ScaledStepModel(base, prefill=p_f, decode=d)
            view = ScaledStepCache(cache, prefill=p_f, decode=d)
            before = CachedStepModel(exact)
            for t, p, n, c in _batches():
                if t == 0 and n == 0:
                    continue
                want = parts_time(exact.step_parts(t, p, n, c))
                own = abs(cache.mixed(t, p, n, c)[0] / parts_time(parts(t, p, n, c)) - 1.0)
                rel = 1e-9 + max(p_f, d) / min(p_f, d) * own
                assert view.mixed(t, p, n, c)[0] == pytest.approx(want, rel=rel)
                assert _step(view, t, p, n, c).time_s == pytest.approx(want, rel=rel)
                if t == 0:
                    assert view.decode(n, c) == view.mixed(0, 0.0, n, c)
                worst_before = max(worst_before, abs(before.mixed(t, p, n, c)[0] / want - 1.0))
    assert worst_before > 0.05
