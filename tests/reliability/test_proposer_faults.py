"""Issue item 1: a slow or hanging proposer does not starve the built-in one."""

from __future__ import annotations

import threading

import attrs

from koi.config import KoiConfig, PlannerConfig
from koi.planner import Planner
from koi.plugins import hookimpl
from koi.types import ActionKind, ClusterSnapshot, Job, Ladder
from tests.planner._world import CATALOG, chat_job, pools


class _Hangs:
    """Named to sort before ``koi.default_proposer``; never answers until released."""

    koi_plugin_name = "a-hanging-proposer"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    @hookimpl
    def koi_propose_ladders(self, job: Job, context: object) -> list[Ladder]:
        self.calls += 1
        self.release.wait(30)
        return []


def _config(timeout_s: float) -> KoiConfig:
    return attrs.evolve(KoiConfig(), planner=PlannerConfig(proposer_timeout_s=timeout_s))


def test_a_hanging_proposer_named_first_does_not_starve_the_builtin_one() -> None:
    hangs = _Hangs()
    planner = Planner(catalog=CATALOG, plugins=[hangs], config=_config(0.5))
    snap = ClusterSnapshot(0.0, [chat_job("a"), chat_job("b", rate=2.0)], pools())
    try:
        result = planner.tick(snap)
    finally:
        hangs.release.set()
    assert not result.fallback
    assert {a.kind for a in result.plan.actions} == {ActionKind.PLACE}  # nothing deferred
    assert any("a-hanging-proposer" in e and "abandoned" in e for e in result.errors)
    # Abandoned once, then skipped while it hangs: the tick does not wait once per job.
    assert hangs.calls == 1
    assert any("earlier call still hangs" in e for e in result.errors)


def test_a_running_job_is_kept_when_no_proposer_answers() -> None:
    hangs = _Hangs()
    planner = Planner(
        catalog=CATALOG, plugins=[hangs], config=_config(0.3), use_default_proposer=False
    )
    first = Planner(catalog=CATALOG).tick(ClusterSnapshot(0.0, [chat_job()], pools()))
    ladder = first.plan.action("chat").ladder
    from koi.types import ActiveDeployment

    snap = ClusterSnapshot(300.0, [chat_job()], pools(), [ActiveDeployment("chat", ladder)])
    try:
        result = planner.tick(snap)
    finally:
        hangs.release.set()
    action = result.plan.action("chat")
    assert action.kind is ActionKind.KEEP
    assert action.ladder == ladder


def test_a_serving_job_predicted_to_breach_is_not_stopped_for_its_score() -> None:
    from koi.types import ActiveDeployment, AdmissionPolicy, Chain, Config, Pool, Rank
    from tests.reliability.test_tick_faults import L4

    # Far more than one L4 serves within its SLO.  Policy `refuse`: a best-effort job's stop
    # is priced below its best-effort options anyway; this is about the guard alone.
    job = attrs.evolve(chat_job("chat", rate=20.0), admission=AdmissionPolicy.REFUSE)
    pool = Pool(L4, 1)  # and no room to grow
    ladder = Ladder((Rank(Chain(job.model, L4, Config()), 1),))
    snap = ClusterSnapshot(600.0, [job], [pool], [ActiveDeployment("chat", ladder)])
    result = Planner(catalog=CATALOG).tick(snap)
    keep = next(c for c in result.candidates_for("chat") if c.kind is ActionKind.KEEP)
    stop = next(c for c in result.candidates_for("chat") if c.kind is ActionKind.STOP)
    assert keep.breach_probability > 0.5  # the keep ladder is predicted to breach ...
    assert stop.value > keep.value  # ... and stopping would score better on its own ...
    assert result.plan.action("chat").kind is ActionKind.KEEP  # ... yet it keeps serving
