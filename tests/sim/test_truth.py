"""The synthetic world's truth (``world = "synthetic"``): seeded, within its documented ranges,
and an exact scaling of the prior.  Its factors are keyed by koi's own strata by construction;
that is why the built-in scenarios use the measured world instead (tests/sim/test_measured.py).
"""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from koi.catalog import Catalog
from koi.sim import TruthConfig
from koi.sim._truth import TruthModel
from koi.surrogate import OperatorModel
from koi.surrogate.replay import CachedStepModel, StepTime
from koi.types import Config

STEP = {
    "prefill_tokens": 0,
    "prefill_pairs": 0.0,
    "decode_seqs": 16,
    "decode_context_tokens": 16_000,
}


def _in(x: float, span: tuple[float, float]) -> bool:
    lo, hi = span
    return (1 + lo - 1e-9 <= x <= 1 + hi + 1e-9) or (
        1 / (1 + hi) - 1e-9 <= x <= 1 / (1 + lo) + 1e-9
    )


@given(seed=st.integers(0, 2**31 - 1), gpu=st.sampled_from(["H100-SXM", "L40S", "MI300X", "L4"]))
def test_factors_are_seeded_and_in_range(catalog: Catalog, seed: int, gpu: str) -> None:
    cfg = TruthConfig()
    model = catalog.models["Llama-3.1-8B"]
    f = TruthModel(seed).factors(catalog.gpus[gpu], model, Config(tp=1))
    assert f == TruthModel(seed).factors(catalog.gpus[gpu], model, Config(tp=1))
    assert _in(f.compute, cfg.compute_error)
    assert _in(f.memory, cfg.memory_error)
    assert _in(f.bubble, cfg.bubble_error)
    assert _in(f.overhead, cfg.overhead_error)


def test_factors_differ_across_seeds_and_strata(catalog: Catalog) -> None:
    g, m = catalog.gpus["H100-SXM"], catalog.models["Llama-3.1-8B"]
    draws = {TruthModel(s).factors(g, m, Config()).compute for s in range(20)}
    assert len(draws) == 20
    t = TruthModel(0)
    big = catalog.models["Llama-3.1-70B"]
    # The synthetic truth is keyed by koi's stratum (GPU x engine x model class): this is the
    # closed form that one correction per stratum can undo, kept for tests that need it.
    assert t.factors(g, m, Config()) != t.factors(g, big, Config())


def test_pcie_comm_is_several_times_slower_at_high_tp(catalog: Catalog) -> None:
    m = catalog.models["Llama-3.1-70B"]
    for seed in range(10):
        t = TruthModel(seed)
        # The hidden multiplier applies to PCIe with peer-to-peer (the catalog's L40S node lacks
        # it, which the surrogate's prior models itself).
        l40s = attrs.evolve(catalog.gpus["L40S"], link="pcie")
        pcie8 = t.factors(l40s, m, Config(tp=8)).comm
        pcie2 = t.factors(l40s, m, Config(tp=2)).comm
        nvl8 = t.factors(catalog.gpus["H100-SXM"], m, Config(tp=8)).comm
        assert pcie8 >= 2.0
        assert 1.0 < pcie2 < pcie8
        assert _in(nvl8, TruthConfig().comm_error)


def test_true_step_scales_the_prior(catalog: Catalog) -> None:
    g, m, c = catalog.gpus["A100-80GB"], catalog.models["Llama-3.1-8B"], Config(tp=2)
    truth = TruthModel(3, TruthConfig(step_noise_cv=0.0))
    f = truth.factors(g, m, c)
    prior = OperatorModel(g, m, c).step(**STEP)
    true = truth.step_model(g, m, c).step(**STEP)
    assert true == prior.scaled(
        compute=f.compute, memory=f.memory, comm=f.comm, bubble=f.bubble, overhead=f.overhead
    )
    slow = truth.step_model(g, m, c, slow=2.0).step(**STEP)
    assert slow.time_s == pytest.approx(2 * true.time_s)
    truth.board.update("A100-80GB", 0.5)
    assert truth.step_model(g, m, c).step(**STEP).time_s == pytest.approx(2 * true.time_s)


def test_driver_update_draws_within_range(catalog: Catalog) -> None:
    truth = TruthModel(0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        s = truth.driver_update("L4", rng)
        assert _in(s, TruthConfig().driver_update_error)
    assert truth.driver_update("L4", rng, speed=0.8) == 0.8


def test_noise_keeps_the_cache_exact(catalog: Catalog) -> None:
    """Noise depends on the batch shape only, so the engine's affine cache reproduces it."""
    g, m, c = catalog.gpus["H100-SXM"], catalog.models["Qwen3-8B"], Config()
    true = TruthModel(5).step_model(g, m, c)
    cached = CachedStepModel(true)
    for ctx in (1_000, 9_000, 40_000):
        exact = true.step(
            prefill_tokens=0, prefill_pairs=0.0, decode_seqs=8, decode_context_tokens=ctx
        )
        got = cached.step(
            prefill_tokens=0, prefill_pairs=0.0, decode_seqs=8, decode_context_tokens=ctx
        )
        assert got.time_s == pytest.approx(exact.time_s, rel=1e-6)
    noisy = {
        true.step(
            prefill_tokens=0, prefill_pairs=0.0, decode_seqs=n, decode_context_tokens=0
        ).time_s
        / OperatorModel(g, m, c)
        .step(prefill_tokens=0, prefill_pairs=0.0, decode_seqs=n, decode_context_tokens=0)
        .time_s
        for n in range(1, 40)
    }
    assert len(noisy) > 30  # the ratio scatters with the shape
    assert all(math.isfinite(x) and x > 0 for x in noisy)
    assert isinstance(true.step(**STEP), StepTime)


@pytest.mark.parametrize("kind", ["synthetic", "measured"])
def test_a_reference_planner_can_rebuild_the_worlds_truth(catalog: Catalog, kind: str) -> None:
    """The oracle rebuilds the truth from the world: same steps, same drawn updates."""
    import attrs

    from koi.sim import build_world, event_rng, load_scenario, reference_truth
    from koi.types import Chain

    scenario = attrs.evolve(load_scenario("smoke"), world=kind)
    world = build_world(scenario, seed=3)
    copy = reference_truth(world)
    assert copy.kind == kind
    pool = world.pools()[0]
    chain = Chain("Llama-3.1-8B", pool.environment, Config())
    gpu, model = catalog.gpus[pool.environment.gpu], catalog.models["Llama-3.1-8B"]
    spec = world._spec(chain, 1.0)
    assert spec is not None
    inner = spec.step_model.model
    mine = copy.step_model(gpu, model, Config(), environment=pool.environment)
    assert inner.step(**STEP) == mine.step(**STEP)
    drawn = copy.driver_update("L4", event_rng(world.seed, 0))
    again = reference_truth(world).driver_update("L4", event_rng(world.seed, 0))
    assert drawn == again


def test_synthetic_world_engines_schedule_as_documented() -> None:
    """In the synthetic world only speed is hidden: an SGLang chain runs prefill-first."""
    import attrs

    from koi.sim import build_world, load_scenario
    from koi.types import Chain

    world = build_world(attrs.evolve(load_scenario("smoke"), world="synthetic"), seed=0)
    env = world.pools()[0].environment
    for engine, mixed in (("vllm", True), ("sglang", False)):
        chain = Chain("Llama-3.1-8B", env, Config(engine=engine, max_batch_size=96))
        spec = world._spec(chain, 1.0)
        assert spec is not None
        assert spec.mixed_prefill is mixed
        assert spec.max_batch_size == 96
