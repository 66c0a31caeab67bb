"""``with_knobs``: set KoiConfig fields by dotted path, checked by the fields' own validators."""

from __future__ import annotations

import attrs
import pytest

from koi.baselines import koi_config, make_policy
from koi.config import KoiConfig, with_knobs
from koi.errors import InvalidInput


def test_knobs_set_fields_in_the_fields_own_types() -> None:
    cfg = with_knobs(
        KoiConfig(),
        {"planner.tau": 0, "planner.learning": False, "proposer.tp_options": [1, 2]},
    )
    assert cfg.planner.tau == 0.0
    assert isinstance(cfg.planner.tau, float)
    assert cfg.planner.learning is False
    assert cfg.proposer.tp_options == (1, 2)
    assert cfg.planner.search_rounds == KoiConfig().planner.search_rounds  # untouched
    assert with_knobs(KoiConfig(), {}) == KoiConfig()


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("planner.tau", 1.5, r"knob 'planner.tau': tau: must be in \[0, 1\]"),
        ("planner.nope", 1, "KoiConfig.planner has no field 'nope'"),
        ("nope.tau", 1, "KoiConfig has no field 'nope'"),
        ("planner", 1, "is a section"),
        ("planner.tau.x", 1, "is a value, not a section"),
        ("planner.search_rounds", 1.5, "expected a value of type int"),
        ("planner.learning", 1, "expected a value of type bool"),
        ("planner..tau", 1, "dotted path"),
    ],
)
def test_bad_knobs_fail_naming_the_knob(knob: str, value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        with_knobs(KoiConfig(), {knob: value})


def test_koi_planners_take_the_config_and_their_ablations_keep_their_switch() -> None:
    cfg = with_knobs(KoiConfig(), {"planner.tau": 0.05})
    koi = make_policy("koi", config=cfg)
    frozen = make_policy("koi-frozen", config=cfg)
    assert koi.planner.config.planner.tau == 0.05
    assert frozen.planner.config.planner.tau == 0.05
    assert frozen.planner.config.planner.learning is False
    assert make_policy("koi").planner.config == koi_config("koi", KoiConfig())


@pytest.mark.parametrize(
    ("knob", "value", "message"),
    [
        ("proposer.utilization_target", 0.0, r"utilization_target: must be in \(0, 1\]"),
        ("proposer.retry_headroom", 1.5, r"retry_headroom: must be in \(0, 1\]"),
        ("proposer.tp_options", [], "tp_options: must be a non-empty list of integers >= 1"),
        ("proposer.tp_options", [0, -1], "tp_options: must be a non-empty list"),
        ("proposer.batch_options", ["a"], "batch_options: must be a non-empty list"),
        ("proposer.max_replicas", 0, "max_replicas: must be an integer >= 1"),
        ("budget.extra_pools", -1, "extra_pools: must be an integer >= 0"),
        ("risk.upper_quantile", 0.5, r"upper_quantile: must be > 0.5"),
        ("surrogate.seed", -1, "seed: must be an integer >= 0"),
        ("surrogate.default_engine", "tgi", "default_engine: must be one of vllm"),
        ("surrogate.replay_min_requests", 5000, "replay_min_requests: must be <= replay_max"),
        ("surrogate.efficiency", [1], "efficiency: must map names to Efficiency"),
        ("scoring.load_gb_s_by_gpu", [["L4"]], "load_gb_s_by_gpu: must map GPU names"),
    ],
)
def test_values_a_tick_cannot_use_are_refused_when_the_config_is_built(
    knob: str, value: object, message: str
) -> None:
    """Each was accepted before and every tick then fell back with an internal error (a
    division by zero, an empty enumeration, a negative random seed), or the config raised a
    bare TypeError (a fuzzing round; docs/reliability.md)."""
    with pytest.raises(InvalidInput, match=message):
        with_knobs(KoiConfig(), {knob: value})


@pytest.mark.parametrize("field", ["make_room", "learning", "causal_graph", "spread_best_effort"])
def test_switches_take_only_true_or_false(field: str) -> None:
    for value in ("3", None, 1):
        with pytest.raises(InvalidInput, match=f"{field}: must be true or false"):
            attrs.evolve(KoiConfig().planner, **{field: value})


def test_an_optional_knob_that_is_off_can_be_set() -> None:
    """``slow_replica_ratio`` is None by default; a sweep or an agent file turns it on."""
    cfg = with_knobs(KoiConfig(), {"planner.slow_replica_ratio": 1.5})
    assert cfg.planner.slow_replica_ratio == 1.5
    assert (
        with_knobs(KoiConfig(), {"planner.slow_replica_ratio": 2}).planner.slow_replica_ratio == 2.0
    )
    with pytest.raises(InvalidInput, match="slow_replica_ratio: must be > 1"):
        with_knobs(KoiConfig(), {"planner.slow_replica_ratio": 0.5})
