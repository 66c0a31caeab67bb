"""Malformed telemetry and snapshots are refused with :class:`InvalidInput` before a tick changes
anything (docs/integration.md, "Failures"): wrong types in an observation, a window in the
future, a window given twice, a snapshot earlier than the last tick's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from koi.errors import InvalidInput, KoiError
from koi.planner import Planner
from koi.planner._observe import checked_observations
from koi.plugins import hookimpl
from koi.testing.fakes import example_snapshot
from koi.types import Chain, ClusterSnapshot, Mediators, Observation, Outcomes

NOW = 600.0


def _snapshot(time_s: float = NOW) -> ClusterSnapshot:
    return example_snapshot(time_s)


def _chain(snapshot: ClusterSnapshot) -> Chain:
    return snapshot.active[0].ladder.ranks[0].chain


def _observation(
    snapshot: ClusterSnapshot, start_s: float = NOW - 300.0, end_s: float = NOW
) -> Observation:
    """A valid window of the example fleet's running chat rank."""
    return Observation(
        job_id="chat",
        chain=_chain(snapshot),
        start_s=start_s,
        end_s=end_s,
        requests=1200,
        completed=1190,
        replicas_up=1,
        outcomes=Outcomes(
            cost_per_mtok_usd=0.5,
            p99_ttft_ms=400.0,
            p99_tpot_ms=40.0,
            throughput_tok_s=800.0,
            slo_margin=0.2,
        ),
        mediators=Mediators(0.5, 16.0, 1.0, 0.6, 0.4, 0.0, 0.0, 0.0, 0.3, 0.7),
    )


def _forced(obs: Observation, **fields: object) -> Observation:
    """``obs`` with ``fields`` set past the validators, as a careless caller's copy could be."""
    bad = attrs.evolve(obs)
    for name, value in fields.items():
        object.__setattr__(bad, name, value)
    return bad


def _refused(
    planner: Planner, snapshot: ClusterSnapshot, obs: list[Observation], match: str
) -> None:
    """The tick raises ``InvalidInput`` matching ``match`` and the planner's state is untouched."""
    before = planner.state
    with pytest.raises(InvalidInput, match=match) as info:
        planner.tick(snapshot, obs)
    assert isinstance(info.value, KoiError)
    assert planner.state is before


# ---- 1. field types ---------------------------------------------------------------------------

_WRONG_TYPES: list[tuple[str, object, str]] = [
    ("outcomes", {}, r"^outcomes: expected Outcomes, got dict$"),
    ("outcomes", None, r"^outcomes: expected Outcomes, got NoneType$"),
    ("mediators", {}, r"^mediators: expected Mediators, got dict$"),
    ("mediators", None, r"^mediators: expected Mediators, got NoneType$"),
    ("chain", {}, r"^chain: expected Chain, got dict$"),
    ("chain", None, r"^chain: expected Chain, got NoneType$"),
    ("healthy", 1, r"^healthy: must be true or false, got 1$"),
    ("healthy", "yes", r"^healthy: must be true or false, got 'yes'$"),
    ("healthy", None, r"^healthy: must be true or false, got None$"),
    ("healthy", np.True_, r"^healthy: must be true or false, got (np\.)?True_?$"),
]


@pytest.mark.parametrize(("field", "value", "match"), _WRONG_TYPES)
def test_an_observation_with_a_wrong_type_is_not_built(
    field: str, value: object, match: str
) -> None:
    good = _observation(_snapshot())
    change: dict[str, Any] = {field: value}
    with pytest.raises(InvalidInput, match=match):
        attrs.evolve(good, **change)
    fields: dict[str, Any] = {a.name: getattr(good, a.name) for a in attrs.fields(Observation)}
    with pytest.raises(InvalidInput, match=match):
        Observation(**(fields | change))


def test_a_real_bool_and_the_right_types_are_accepted() -> None:
    good = _observation(_snapshot())
    assert attrs.evolve(good, healthy=False).healthy is False
    assert good.healthy is True


@pytest.mark.parametrize(("field", "value", "match"), _WRONG_TYPES)
def test_a_tick_names_the_observation_with_a_wrong_type(
    field: str, value: object, match: str
) -> None:
    snapshot = _snapshot()
    good = _observation(snapshot)
    other = _observation(snapshot, start_s=0.0, end_s=NOW - 300.0)
    bad = _forced(good, **{field: value})
    where = match.replace("^", r"^observations\[1\]\.", 1)
    _refused(Planner(), snapshot, [other, bad], where)


# ---- 2. windows in the future, windows given twice ---------------------------------------------


def test_a_window_that_ends_after_the_snapshot_is_refused() -> None:
    snapshot = _snapshot()
    past = _observation(snapshot, start_s=NOW - 300.0, end_s=NOW)
    future = _observation(snapshot, start_s=NOW, end_s=NOW + 300.0)
    straddling = _observation(snapshot, start_s=NOW - 100.0, end_s=NOW + 1.0)
    planner = Planner()
    _refused(planner, snapshot, [past, future], r"^observations\[1\]\.end_s: .*future")
    _refused(planner, snapshot, [straddling], r"^observations\[0\]\.end_s: .*601\.0.*600\.0")


def test_a_window_that_ends_at_the_snapshot_is_accepted() -> None:
    snapshot = _snapshot()
    obs = [_observation(snapshot, start_s=NOW - 300.0, end_s=NOW)]
    assert checked_observations(obs, snapshot) == obs
    result = Planner().tick(snapshot, obs)
    assert not result.fallback, result.errors


def test_a_window_given_twice_is_refused() -> None:
    snapshot = _snapshot()
    first = _observation(snapshot)
    earlier = _observation(snapshot, start_s=0.0, end_s=NOW - 300.0)
    again = attrs.evolve(first)  # equal, not the same object
    _refused(
        Planner(),
        snapshot,
        [first, earlier, again],
        r"^observations\[2\]: the same window as observations\[0\] .*given twice",
    )
    _refused(Planner(), snapshot, [first, first], r"^observations\[1\]: .*observations\[0\]")


def test_a_window_given_twice_with_other_values_is_still_refused() -> None:
    # Two readings of one window disagree: koi cannot tell which is right, nor count both.
    snapshot = _snapshot()
    first = _observation(snapshot)
    second = attrs.evolve(first, requests=5, completed=5)
    _refused(Planner(), snapshot, [first, second], r"^observations\[1\]: .*twice")


def test_distinct_windows_of_one_rank_and_one_window_of_distinct_ranks_are_accepted() -> None:
    snapshot = _snapshot()
    chain = _chain(snapshot)
    other_chain = attrs.evolve(chain, config=attrs.evolve(chain.config, max_batch_size=32))
    a = _observation(snapshot)
    b = _observation(snapshot, start_s=0.0, end_s=NOW - 300.0)
    c = attrs.evolve(a, chain=other_chain)
    d = attrs.evolve(a, job_id="summarize")
    obs = [a, b, c, d]
    assert checked_observations(obs, snapshot) == obs


# ---- 3. the clock runs forward ---------------------------------------------------------------


def test_a_snapshot_earlier_than_the_last_tick_is_refused() -> None:
    planner = Planner()
    assert not planner.tick(_snapshot(NOW)).fallback
    assert planner.state.last_time_s == NOW
    _refused(
        planner,
        _snapshot(NOW - 300.0),
        [],
        r"^snapshot\.time_s: 300\.0 is earlier than the last tick's \(600\.0\)$",
    )
    assert planner.state.tick == 1


def test_a_re_tick_at_the_same_time_and_a_later_tick_are_accepted() -> None:
    planner = Planner()
    first = planner.tick(_snapshot(NOW))
    again = planner.tick(_snapshot(NOW))  # a re-tick with nothing new
    later = planner.tick(
        _snapshot(NOW + 300.0), [_observation(_snapshot(NOW + 300.0), NOW, NOW + 300.0)]
    )
    assert not first.fallback, first.errors
    assert not again.fallback, again.errors
    assert not later.fallback, later.errors
    assert planner.state.tick == 3
    assert planner.state.last_time_s == NOW + 300.0


def test_a_restored_planner_keeps_the_last_tick_time(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with Planner(state_path=path) as planner:
        assert not planner.tick(_snapshot(NOW)).fallback
    with Planner(state_path=path) as restored:
        assert restored.state.last_time_s == NOW
        _refused(restored, _snapshot(NOW - 1.0), [], r"^snapshot\.time_s: 599\.0 is earlier")
        result = restored.tick(_snapshot(NOW))
        assert not result.fallback, result.errors
        assert restored.state.tick == 2


def test_a_first_tick_may_start_at_any_time() -> None:
    planner = Planner()
    assert planner.state.last_time_s is None
    assert not planner.tick(_snapshot(0.0)).fallback


# ---- 4. a plugin's window reported twice ------------------------------------------------------


class _Echo:
    """A second telemetry source that scrapes the same rank: it reports the window again."""

    koi_plugin_name = "echo-telemetry"

    def __init__(self, obs: Observation) -> None:
        self.obs = obs

    @hookimpl
    def koi_collect_telemetry(self, ranks: object, window: tuple[float, float]) -> list[object]:
        del ranks, window
        return [self.obs]


def test_a_window_a_plugin_reports_again_is_dropped_with_an_error() -> None:
    """Not refused (a plugin's telemetry never stops the tick) but counted once: the planner
    learns what a planner given the window once learns."""
    obs = _observation(_snapshot(NOW))
    learned = []
    for plugins in ([], [_Echo(obs)]):
        planner = Planner(plugins=plugins)
        planner.tick(_snapshot(NOW - 300.0))
        result = planner.tick(_snapshot(NOW), [obs])
        assert not result.fallback, result.errors
        dropped = [e for e in result.errors if "already reported" in e]
        assert len(dropped) == len(plugins)
        learned.append((planner.state.residuals, planner.state.corrections))
    assert learned[0] == learned[1]
    # The window is learned from (so a second copy would have weighed twice).
    blind = Planner()
    blind.tick(_snapshot(NOW - 300.0))
    blind.tick(_snapshot(NOW))
    assert learned[0] != (blind.state.residuals, blind.state.corrections)
