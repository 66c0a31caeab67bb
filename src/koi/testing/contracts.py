"""Opt-in conformance suites for koi plugins.

Subclass one in your own test module (the class name must start with ``Test`` so pytest
collects it) and override its fixtures::

    from koi.testing.contracts import TelemetryContract

    class TestMyTelemetry(TelemetryContract):
        @pytest.fixture
        def telemetry_source(self):
            return MyTelemetry(endpoint="...")

        @pytest.fixture
        def deployed(self):
            return [("chat", my_rank)], (0.0, 60.0)

Every plugin is driven through :class:`koi.plugins.PluginHost`, exactly as the planner drives
it, so a suite that passes means the planner will accept what the plugin returns.  Nothing here
is registered as a pytest plugin: the suites run only where you subclass them.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from koi.errors import KoiError
from koi.plugins import (
    PluginHost,
    ProposalContext,
    ladder_problems,
    make_plugin_manager,
    plugin_name,
)
from koi.types import ActionKind, Job, JobAction, Ladder, Plan, Quant, Rank

__all__ = ["LauncherContract", "ProposerContract", "TelemetryContract"]

# Hypothesis would warn that the plugin fixture is shared by all examples; the contracts rely
# on exactly that (a plugin must behave the same on every call).
_shared_fixture = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _property_test(cls: type, name: str, body: Callable[..., None]) -> None:
    """Give each subclass its own Hypothesis test object.

    One ``@given`` function shared by several subclasses would run under several executors,
    which Hypothesis rightly refuses; a fresh wrapper per subclass keeps them apart.
    """

    @functools.wraps(body)
    def test(self: Any, *args: Any, **kwargs: Any) -> None:
        body(self, *args, **kwargs)

    test.__qualname__ = f"{cls.__qualname__}.{name}"
    test.__name__ = name
    setattr(cls, name, _shared_fixture(given(data=st.data())(test)))


def _host(plugin: object) -> PluginHost:
    return PluginHost(make_plugin_manager(plugins=[plugin], entry_points=False))


def _implements(plugin: object, hook: str) -> None:
    pm = make_plugin_manager(plugins=[plugin], entry_points=False)
    hooks = {c.name for c in pm.get_hookcallers(plugin) or ()}
    assert hook in hooks, f"{plugin_name(plugin)} does not implement {hook}"


def _call_hook(plugin: object, hook: str, **kwargs: Any) -> Any:
    fn = getattr(plugin, hook)
    accepted = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in accepted})


class ProposerContract:
    """Conformance suite for a ``koi_propose_ladders`` plugin.

    Override ``proposer`` (the plugin object) and ``proposal_case`` (a job and a context in
    which the proposer has something to propose).  Set ``allow_rejections = True`` if the
    proposer legitimately explains dropped ideas with :class:`~koi.plugins.Rejection` values.

    .. versionadded:: 0.1
    """

    allow_rejections: bool = False
    #: how long the proposer may take to give up once its deadline has already passed
    deadline_grace_s: float = 0.5

    @pytest.fixture
    def proposer(self) -> object:
        raise NotImplementedError("override the `proposer` fixture")

    @pytest.fixture
    def proposal_case(self) -> tuple[Job, ProposalContext]:
        raise NotImplementedError("override the `proposal_case` fixture")

    def test_implements_the_hook(self, proposer: object) -> None:
        _implements(proposer, "koi_propose_ladders")

    def test_proposes_valid_ladders(
        self, proposer: object, proposal_case: tuple[Job, ProposalContext]
    ) -> None:
        job, context = proposal_case
        batch = _host(proposer).propose_ladders(job, context)
        assert not batch.errors, f"proposer failed: {batch.errors}"
        if not self.allow_rejections:
            assert not batch.rejections, f"proposals rejected: {batch.rejections}"
        assert batch.ladders, "the proposer proposed nothing in its own test case"
        for ladder in batch.ladders:
            assert not ladder_problems(ladder, job, context)

    def test_respects_the_precision_policy(
        self, proposer: object, proposal_case: tuple[Job, ProposalContext]
    ) -> None:
        # Whatever the job's owner narrows its precisions to, nothing outside them comes back.
        job, context = proposal_case
        host = _host(proposer)
        for quant in Quant:
            narrowed = attrs.evolve(job, precisions=(quant,))
            batch = host.propose_ladders(narrowed, context)
            for ladder in batch.ladders:
                problem = narrowed.precision_problem(ladder)
                assert problem is None, f"proposed against the job's policy: {problem}"

    def test_respects_max_candidates(
        self, proposer: object, proposal_case: tuple[Job, ProposalContext]
    ) -> None:
        job, context = proposal_case
        batch = _host(proposer).propose_ladders(job, attrs.evolve(context, max_candidates=1))
        assert not batch.errors, f"proposer failed: {batch.errors}"
        assert len(batch.ladders) <= 1

    def test_is_deterministic(
        self, proposer: object, proposal_case: tuple[Job, ProposalContext]
    ) -> None:
        job, context = proposal_case
        host = _host(proposer)
        assert host.propose_ladders(job, context) == host.propose_ladders(job, context)

    def test_gives_up_at_an_expired_deadline(
        self, proposer: object, proposal_case: tuple[Job, ProposalContext]
    ) -> None:
        job, context = proposal_case
        expired = attrs.evolve(context, deadline_s=time.monotonic() - 1.0)
        start = time.monotonic()
        try:
            result = _call_hook(proposer, "koi_propose_ladders", job=job, context=expired)
            list(result or ())
        except KoiError:
            pass  # refusing with a koi error is a fine way to give up
        elapsed = time.monotonic() - start
        assert elapsed <= self.deadline_grace_s, f"took {elapsed:.2f} s past its deadline"


class TelemetryContract:
    """Conformance suite for a ``koi_collect_telemetry`` plugin.

    Override ``telemetry_source`` (the plugin object) and ``deployed``: the ``(job_id, rank)``
    pairs the source can see and a window it has data for.

    .. versionadded:: 0.1
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _property_test(
            cls, "test_stays_inside_any_window", TelemetryContract._stays_inside_any_window
        )

    @pytest.fixture
    def telemetry_source(self) -> object:
        raise NotImplementedError("override the `telemetry_source` fixture")

    @pytest.fixture
    def deployed(self) -> tuple[Sequence[tuple[str, Rank]], tuple[float, float]]:
        raise NotImplementedError("override the `deployed` fixture")

    def test_implements_the_hook(self, telemetry_source: object) -> None:
        _implements(telemetry_source, "koi_collect_telemetry")

    def test_observations_are_valid_and_asked_for(
        self,
        telemetry_source: object,
        deployed: tuple[Sequence[tuple[str, Rank]], tuple[float, float]],
    ) -> None:
        ranks, window = deployed
        batch = _host(telemetry_source).collect_telemetry(ranks, window)
        assert not batch.errors, f"source failed: {batch.errors}"
        assert not batch.skipped, f"observations skipped: {batch.skipped}"
        assert batch.observations, "the source returned nothing for its own test case"
        wanted = {(j, r.chain) for j, r in ranks}
        for obs in batch.observations:
            assert (obs.job_id, obs.chain) in wanted
            assert window[0] <= obs.start_s < obs.end_s <= window[1]

    def test_nothing_deployed_nothing_observed(
        self,
        telemetry_source: object,
        deployed: tuple[Sequence[tuple[str, Rank]], tuple[float, float]],
    ) -> None:
        batch = _host(telemetry_source).collect_telemetry((), deployed[1])
        assert batch.observations == ()
        assert not batch.errors

    def _stays_inside_any_window(
        self,
        telemetry_source: object,
        deployed: tuple[Sequence[tuple[str, Rank]], tuple[float, float]],
        data: st.DataObject,
    ) -> None:
        ranks, (lo, hi) = deployed
        a = data.draw(st.floats(lo, hi, allow_nan=False), label="start")
        b = data.draw(st.floats(a, hi, allow_nan=False).filter(lambda x: x > a), label="end")
        subset = data.draw(st.lists(st.sampled_from(list(ranks)), unique=True), label="ranks")
        batch = _host(telemetry_source).collect_telemetry(subset, (a, b))
        assert not batch.errors
        assert not batch.skipped, f"observations skipped: {batch.skipped}"


class LauncherContract:
    """Conformance suite for a ``koi_launch`` plugin.

    Override ``launcher`` (the plugin object) and ``launch_plan``: a plan with at least one
    running job on the launcher's clouds.  Override ``partial_launch_plan`` too (a plan the
    launcher's own test setup can bring up only in part, e.g. a rank of which only some
    replicas become ready) to check that a partial launch is reported, not raised; without
    it that test is skipped.

    .. versionadded:: 0.1
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _property_test(cls, "test_any_part_of_the_plan", LauncherContract._any_part_of_the_plan)

    @pytest.fixture
    def launcher(self) -> object:
        raise NotImplementedError("override the `launcher` fixture")

    @pytest.fixture
    def launch_plan(self) -> Plan:
        raise NotImplementedError("override the `launch_plan` fixture")

    @pytest.fixture
    def partial_launch_plan(self) -> Plan:
        pytest.skip("override `partial_launch_plan` to check how partial launches are reported")

    def test_implements_the_hook(self, launcher: object) -> None:
        _implements(launcher, "koi_launch")

    def test_reports_a_partial_launch(self, launcher: object, partial_launch_plan: Plan) -> None:
        batch = _host(launcher).launch(partial_launch_plan)
        assert not batch.errors, f"a partial launch must be reported, not raised: {batch.errors}"
        partial = [r for r in batch.results if not r.complete]
        assert partial, "every result claims a complete launch of a plan set up to fall short"
        for r in partial:
            assert r.message, f"{r.job_id}: an incomplete launch must say what fell short"
        # The planner records what materialized, so a partial rank reaches its ledger.
        for r in partial:
            assert batch.materialized(r.job_id) == r.materialized

    def test_reports_only_what_was_asked(self, launcher: object, launch_plan: Plan) -> None:
        batch = _host(launcher).launch(launch_plan)
        assert not batch.errors, f"launcher failed: {batch.errors}"
        assert batch.results, "the launcher launched nothing in its own test case"
        assert {r.job_id for r in batch.results} <= set(launch_plan.ladders)

    def test_deferring_everything_launches_nothing(
        self, launcher: object, launch_plan: Plan
    ) -> None:
        idle = [JobAction(a.job_id, ActionKind.DEFER) for a in launch_plan.actions]
        batch = _host(launcher).launch(Plan(launch_plan.time_s, idle))
        assert batch.results == ()
        assert not batch.errors

    def _any_part_of_the_plan(
        self, launcher: object, launch_plan: Plan, data: st.DataObject
    ) -> None:
        keep = data.draw(st.sets(st.sampled_from([a.job_id for a in launch_plan.actions])))
        actions = [
            a if a.job_id in keep else JobAction(a.job_id, ActionKind.DEFER, Ladder())
            for a in launch_plan.actions
        ]
        plan = Plan(launch_plan.time_s, actions)
        batch = _host(launcher).launch(plan)
        assert not batch.errors, f"launcher failed: {batch.errors}"
        assert {r.job_id for r in batch.results} <= {j for j in keep if j in plan.ladders}
