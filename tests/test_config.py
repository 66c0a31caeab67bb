"""``with_knobs``: set KoiConfig fields by dotted path, checked by the fields' own validators."""

from __future__ import annotations

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
