"""Settled jobs: a running job with nothing new is only re-checked (keep or stop) between its
periodic full reviews, and anything of its own that changes brings it back at once."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from koi.config import KoiConfig
from koi.planner import Planner
from koi.planner._propose import budget_books
from koi.planner._review import due_for_review
from koi.selector import BudgetBooks
from koi.surrogate import RankCorrection
from koi.types import ActionKind, Observation, ServingTarget

from ._world import CATALOG, World, chat_job, pools

SLOW = RankCorrection(decode_time=1.6, prefill_time=1.3)
CHANGES = {ActionKind.PLACE, ActionKind.RECONFIGURE}


def _planner(every: int) -> Planner:
    cfg = KoiConfig()
    return Planner(
        catalog=CATALOG,
        config=attrs.evolve(cfg, planner=attrs.evolve(cfg.planner, review_every=every)),
    )


def _reviewed(planner: Planner, world: World, obs: Sequence[Observation]) -> bool:
    """One tick; was ``chat`` reviewed in full (proposals evaluated), not only re-checked?"""
    result = planner.tick(world.snapshot(), obs)
    assert not result.fallback, result.errors
    world.apply(result.plan)
    return any(c.kind in CHANGES for c in result.candidates if c.job_id == "chat")


def _settle(planner: Planner, world: World, ticks: int = 3) -> list[Observation]:
    """Place ``chat`` and run until its ladder stops changing."""
    obs: list[Observation] = []
    for _ in range(ticks):
        _reviewed(planner, world, obs)
        obs = world.advance()
    return obs


def _world() -> World:
    return World([chat_job()], pools(per_pool=4), truth=lambda _c: SLOW)


def test_a_settled_job_is_rechecked_between_its_staggered_full_reviews() -> None:
    every = 3
    planner, world = _planner(every), _world()
    obs = _settle(planner, world)
    pattern = []
    for _ in range(2 * every):
        due = due_for_review("chat", planner.state.tick, every)
        pattern.append((due, _reviewed(planner, world, obs)))
        obs = world.advance()
    assert all(full == due for due, full in pattern), pattern
    assert sum(due for due, _ in pattern) == 2
    # review_every = 1 reviews every job on every tick.
    planner, world = _planner(1), _world()
    obs = _settle(planner, world)
    for _ in range(every):
        assert _reviewed(planner, world, obs)
        obs = world.advance()


def _next_quiet_tick(planner: Planner, world: World, obs: list[Observation]) -> list[Observation]:
    """Tick until the next tick is not ``chat``'s periodic review."""
    while due_for_review("chat", planner.state.tick, planner.config.planner.review_every):
        _reviewed(planner, world, obs)
        obs = world.advance()
    return obs


def test_what_changes_for_the_job_brings_it_back_at_once() -> None:
    def busier(o: Observation) -> Observation:  # traffic 50 % over what it was sized for
        return attrs.evolve(o, requests=o.requests * 3 // 2, completed=o.completed * 3 // 2)

    def near_bound(o: Observation) -> Observation:  # measured p99 TTFT at the bound
        return attrs.evolve(o, outcomes=attrs.evolve(o.outcomes, p99_ttft_ms=1500.0))

    for change in ("traffic", "telemetry", "declaration", "ladder"):
        planner, world = _planner(50), _world()
        obs = _next_quiet_tick(planner, world, _settle(planner, world))
        assert not _reviewed(planner, world, obs), "settled before the change"
        obs = _next_quiet_tick(planner, world, world.advance())
        if change == "traffic":
            obs = [busier(o) for o in obs]
        elif change == "telemetry":
            obs = [near_bound(o) for o in obs]
        elif change == "declaration":
            tighter = ServingTarget.online(p99_ttft_ms=1200, p99_tpot_ms=60)
            world.jobs = [attrs.evolve(j, target=tighter) for j in world.jobs]
        else:
            ladder = world.active["chat"].ladder
            ranks = [attrs.evolve(r, replicas=r.replicas + 1) for r in ladder.ranks]
            bigger = attrs.evolve(ladder, ranks=ranks)
            world.active["chat"] = attrs.evolve(world.active["chat"], ladder=bigger)
        assert _reviewed(planner, world, obs), change


def test_the_books_leave_out_what_settled_jobs_hold() -> None:
    planner = Planner(catalog=CATALOG)
    snapshot = _world().snapshot()

    def first_pool(held: dict[str, int]) -> str:
        books = budget_books(
            planner.host,
            BudgetBooks(planner.config.budget),
            snapshot,
            snapshot.jobs,
            screener=lambda job: planner.generator.screener,
            gpus=planner.gpus,
            reference_costs={"chat": 1.0},
            cfg=planner.config,
            errors=[],
            held=held,
        )
        return books["chat"].pools[0]

    best = first_pool({})
    capacity = next(p.capacity_gpus for p in snapshot.pools if p.id == best)
    assert first_pool({best: capacity}) != best  # all of it held: the LP gives it no share
    assert first_pool({best: capacity - 1}) == best
