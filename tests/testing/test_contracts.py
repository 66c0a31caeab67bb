"""The conformance suites, run against koi's fake plugins, and shown to catch broken ones."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from koi.errors import KoiWarning
from koi.plugins import ProposalContext, hookimpl
from koi.testing.contracts import LauncherContract, ProposerContract, TelemetryContract
from koi.testing.fakes import (
    FixedProposer,
    StaticFleet,
    example_gpus,
    example_models,
    example_snapshot,
)
from koi.types import ActionKind, Chain, Config, Job, JobAction, Ladder, LaunchResult, Plan, Rank

SNAP = example_snapshot()
H100, L4, INHOUSE = (p.environment for p in SNAP.pools)


def _ladder(env: Any, model: str = "Llama-3.1-8B", tp: int = 1) -> Ladder:
    return Ladder((Rank(Chain(model, env, Config(tp=tp)), 1),))


def _context() -> ProposalContext:
    return ProposalContext(
        snapshot=SNAP,
        gpus=example_gpus(),
        models=example_models(),
        deadline_s=time.monotonic() + 60.0,
    )


class TestFixedProposer(ProposerContract):
    @pytest.fixture
    def proposer(self) -> FixedProposer:
        return FixedProposer({"chat": (_ladder(H100), _ladder(L4), _ladder(INHOUSE))})

    @pytest.fixture
    def proposal_case(self) -> tuple[Job, ProposalContext]:
        return SNAP.job("chat"), _context()


class TestStaticFleetTelemetry(TelemetryContract):
    @pytest.fixture
    def telemetry_source(self) -> StaticFleet:
        return StaticFleet(SNAP, {"aws", "inhouse"})

    @pytest.fixture
    def deployed(self) -> tuple[Sequence[tuple[str, Rank]], tuple[float, float]]:
        ranks = [("chat", r) for r in _ladder(H100).ranks + _ladder(INHOUSE, tp=2).ranks]
        return ranks, (0.0, 300.0)


def _plan() -> Plan:
    big = Ladder(
        _ladder(H100, "Llama-3.1-70B", 4).ranks + _ladder(INHOUSE, "Llama-3.1-70B", 4).ranks
    )
    return Plan(
        0.0,
        (
            JobAction("chat", ActionKind.KEEP, SNAP.active[0].ladder),
            JobAction("summarize", ActionKind.PLACE, big),
        ),
    )


class TestStaticFleetLauncher(LauncherContract):
    @pytest.fixture
    def launcher(self) -> StaticFleet:
        return StaticFleet(SNAP, {"aws"}, failing_pools={L4.id})

    @pytest.fixture
    def launch_plan(self) -> Plan:
        return _plan()


# -- the suites fail broken plugins -------------------------------------------------------------


class _Suites(ProposerContract, TelemetryContract, LauncherContract):
    """Not collected (no Test prefix): used to run single contract checks by hand."""


class WrongModel:
    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> Any:
        return [_ladder(H100, model="Llama-3.1-70B")]


class Sleeper:
    @hookimpl
    def koi_propose_ladders(self, job: Job, context: ProposalContext) -> Any:
        time.sleep(0.6)  # ignores the deadline
        return []


class Ghostly:
    @hookimpl
    def koi_collect_telemetry(self, ranks: Any, window: Any) -> Any:
        fleet = StaticFleet(SNAP, {"aws"})
        (obs,) = fleet.koi_collect_telemetry([("ghost", _ladder(H100).ranks[0])], window)
        return [obs]


class Overpromiser:
    @hookimpl
    def koi_launch(self, plan: Plan) -> Any:
        return [LaunchResult("summarize", Ladder(), Ladder())]


def test_contract_catches_a_proposer_that_ignores_the_job() -> None:
    with pytest.raises(AssertionError, match="proposals rejected"):
        _Suites().test_proposes_valid_ladders(WrongModel(), (SNAP.job("chat"), _context()))


def test_contract_catches_a_proposer_that_ignores_its_deadline() -> None:
    with pytest.raises(AssertionError, match="past its deadline"):
        _Suites().test_gives_up_at_an_expired_deadline(Sleeper(), (SNAP.job("chat"), _context()))


def test_contract_catches_telemetry_nobody_asked_for() -> None:
    deployed = ([("chat", _ladder(H100).ranks[0])], (0.0, 60.0))
    with pytest.warns(KoiWarning, match="ghost"), pytest.raises(AssertionError, match="skipped"):
        _Suites().test_observations_are_valid_and_asked_for(Ghostly(), deployed)


def test_contract_catches_a_launcher_reporting_unplanned_jobs() -> None:
    plan = Plan(0.0, (JobAction("chat", ActionKind.KEEP, SNAP.active[0].ladder),))
    with pytest.raises(AssertionError, match="launcher failed"):
        _Suites().test_reports_only_what_was_asked(Overpromiser(), plan)
