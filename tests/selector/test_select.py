"""The joint selector: feasibility, optimality against brute force and scipy, live terms."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koi.errors import InfeasibleError, InvalidInput
from koi.scoring import (
    Normalizer,
    ScoringConfig,
    candidate_value,
    deferral_score,
    ideal_point,
    switching_cost,
    tchebycheff,
)
from koi.selector import (
    Candidate,
    PoolCapacity,
    SelectionProblem,
    SelectionStatus,
    SelectorConfig,
    greedy,
    select,
)
from koi.selector._compile import compile_problem
from koi.selector._formulate import formulate
from koi.types import (
    Chain,
    Config,
    Environment,
    Job,
    Ladder,
    LengthDist,
    ModelSpec,
    Outcomes,
    Rank,
    ServingTarget,
    WorkloadProfile,
)

EXACT = {"mip_rel_gap": 0.0, "time_limit_s": 10.0}

# --- an independent reading of C1, C4, C5 and the objective -----------------------------------


def _use(p: SelectionProblem, c: Candidate) -> dict[str, int]:
    if not c.changes:
        return dict(c.gpus_by_pool)
    if c.transient_gpus_by_pool is not None:
        return dict(c.transient_gpus_by_pool)
    out = dict(p.held_gpus.get(c.job_id, {}))
    for pool, n in c.gpus_by_pool.items():
        out[pool] = out.get(pool, 0) + n
    return out


def _jobs(p: SelectionProblem) -> dict[str, list[Candidate]]:
    out: dict[str, list[Candidate]] = {}
    for c in p.candidates:
        out.setdefault(c.job_id, []).append(c)
    return out


def _quota(p: SelectionProblem, group: str) -> int:
    """C5 cap: the quota, or what the group's jobs hold now if more (keeping is never blocked)."""
    held = sum(sum(p.held_gpus.get(j, {}).values()) for j, g in p.quota_group.items() if g == group)
    return max(p.quota_caps[group], held)


def _feasible_alone(p: SelectionProblem, c: Candidate) -> bool:
    cap = {x.pool_id: x.capacity_gpus for x in p.pools}
    if any(n > cap[pool] for pool, n in _use(p, c).items()):
        return False
    group = p.quota_group.get(c.job_id)
    return group is None or group not in p.quota_caps or c.gpus <= _quota(p, group)


def _takes(p: SelectionProblem, c: Candidate) -> set[str]:
    if c.kind.value not in ("place", "reconfigure"):
        return set()
    held = p.held_gpus.get(c.job_id, {})
    return {pool for pool, n in c.gpus_by_pool.items() if n > held.get(pool, 0)}


def check(p: SelectionProblem, chosen: Mapping[str, str]) -> list[str]:
    """Constraint violations of a plan, computed straight from the problem's definition."""
    jobs = _jobs(p)
    assert set(chosen) == set(jobs)
    pick = {j: next(c for c in jobs[j] if c.key == chosen[j]) for j in jobs}
    bad: list[str] = []
    used: dict[str, int] = {}
    for c in pick.values():
        for pool, n in _use(p, c).items():
            used[pool] = used.get(pool, 0) + n
    cap = {x.pool_id: x.capacity_gpus for x in p.pools}
    bad += [f"C1 {pool}" for pool, n in used.items() if n > cap[pool]]
    if p.swap_budget is not None and sum(c.changes for c in pick.values()) > p.swap_budget:
        bad.append("C4")
    free = dict(cap)  # best-effort candidates share what nobody holds now
    for held in p.held_gpus.values():
        for pool, n in held.items():
            free[pool] -= n
    for c in pick.values():  # and what the chosen room-freeing candidates give up
        if c.frees_room:
            for pool, n in p.held_gpus.get(c.job_id, {}).items():
                free[pool] += max(n - c.gpus_by_pool.get(pool, 0), 0)
    best_effort: dict[str, int] = {}
    for c in pick.values():
        if c.best_effort:
            for pool, n in _use(p, c).items():
                best_effort[pool] = best_effort.get(pool, 0) + n
    bad += [f"free {pool}" for pool, n in best_effort.items() if n > max(free[pool], 0)]
    for group in p.quota_caps:
        total = sum(c.gpus for j, c in pick.items() if p.quota_group.get(j) == group)
        if total > _quota(p, group):
            bad.append(f"C5 quota {group}")
    for h, ch in pick.items():
        if ch.kind.value != "defer":
            continue
        needs: set[str] = set()
        for c in jobs[h]:
            if c.kind.value != "defer" and _feasible_alone(p, c):
                needs |= _takes(p, c)
        for j, c in pick.items():
            if p.priority.get(j, 0) < p.priority.get(h, 0) and _takes(p, c) & needs:
                bad.append(f"C5 priority {h}>{j}")
    return bad


def objective(p: SelectionProblem, chosen: Mapping[str, str]) -> float:
    jobs = _jobs(p)
    pick = [next(c for c in jobs[j] if c.key == k) for j, k in chosen.items()]
    covered: set[Hashable] = set().union(*(c.covers for c in pick))
    return sum(c.value for c in pick) + sum(p.exploration_weights.get(e, 0.0) for e in covered)


def brute_force(p: SelectionProblem) -> float:
    jobs = _jobs(p)
    best = -math.inf
    for combo in itertools.product(*(jobs[j] for j in jobs)):
        plan = {c.job_id: c.key for c in combo}
        if not check(p, plan):
            best = max(best, objective(p, plan))
    return best


# --- random small instances -------------------------------------------------------------------


@st.composite
def problems(draw: st.DrawFn, max_jobs: int = 4, max_cands: int = 3) -> SelectionProblem:
    n_pools = draw(st.integers(1, 3))
    pools = [
        PoolCapacity(f"p{i}", draw(st.integers(0, 8)), draw(st.sampled_from([1, 2, 4])))
        for i in range(n_pools)
    ]
    items = ["e0", "e1", "e2"]
    cands: list[Candidate] = []
    held: dict[str, dict[str, int]] = {}
    priority: dict[str, int] = {}
    group: dict[str, str] = {}
    for j in range(draw(st.integers(1, max_jobs))):
        job = f"j{j}"
        priority[job] = draw(st.integers(0, 2))
        group[job] = draw(st.sampled_from(["a", "b"]))
        active = draw(st.booleans())
        if active:
            pool = f"p{draw(st.integers(0, n_pools - 1))}"
            held[job] = {pool: draw(st.integers(1, 3))}
            cands.append(Candidate(job, "keep", "keep", draw(st.floats(-3, 0)), held[job]))
            if draw(st.booleans()):
                cands.append(
                    Candidate(job, "stop", "defer", draw(st.floats(-8, -2)), {}, changes=True)
                )
        else:
            cands.append(Candidate(job, "defer", "defer", draw(st.floats(-8, -1))))
        for k in range(draw(st.integers(1, max_cands))):
            use = {
                f"p{i}": draw(st.integers(1, 4))
                for i in draw(st.sets(st.integers(0, n_pools - 1), min_size=1, max_size=2))
            }
            covers = draw(st.sets(st.sampled_from(items), max_size=2))
            kind = "reconfigure" if active else "place"
            best_effort = not active and draw(st.booleans())
            cands.append(
                Candidate(
                    job,
                    f"c{k}",
                    kind,
                    draw(st.floats(-4, 0)),
                    use,
                    covers,
                    changes=active,
                    best_effort=best_effort,
                    frees_room=active and draw(st.booleans()),
                )
            )
    return SelectionProblem(
        candidates=cands,
        pools=pools,
        exploration_weights={e: draw(st.floats(0, 1)) for e in items},
        swap_budget=draw(st.none() | st.integers(0, 2)),
        priority=priority,
        quota_group=group,
        quota_caps={"a": draw(st.integers(0, 10)), "b": draw(st.integers(2, 12))},
        held_gpus=held,
    )


@settings(max_examples=60, deadline=None)
@given(p=problems())
def test_select_is_feasible_exact_and_beats_greedy(p: SelectionProblem) -> None:
    best = brute_force(p)
    if best == -math.inf:
        with pytest.raises(InfeasibleError):
            select(p, **EXACT)
        return
    sel = select(p, **EXACT)
    assert check(p, sel.chosen) == []
    assert sel.objective == pytest.approx(objective(p, sel.chosen))
    assert sel.objective == pytest.approx(best, abs=1e-6)
    assert sel.status is SelectionStatus.OPTIMAL
    assert sel.bound >= sel.objective - 1e-9
    try:
        g = greedy(p)
    except InfeasibleError:
        return
    assert check(p, g.chosen) == []
    assert sel.objective >= g.objective - 1e-9
    assert sel.greedy_objective == pytest.approx(g.objective)


def test_best_effort_takes_only_what_a_room_freeing_candidate_gives_up() -> None:
    # "old" holds all four GPUs and may shrink to one; "new" is served best effort on three.
    # GPUs an ordinary scale-in gives up stay out of best effort's reach; those a scale-in
    # offered to make room gives up (the donor within its own target) are free to it.
    def problem(frees_room: bool) -> SelectionProblem:
        return SelectionProblem(
            candidates=(
                Candidate("old", "keep", "keep", 0.0, {"p0": 4}),
                Candidate(
                    "old",
                    "shrink",
                    "reconfigure",
                    -0.1,
                    {"p0": 1},
                    changes=True,
                    transient_gpus_by_pool={"p0": 1},  # a scale-in stops replicas at once
                    frees_room=frees_room,
                ),
                Candidate("new", "defer", "defer", -5.0, {}),
                Candidate("new", "serve", "place", -1.0, {"p0": 3}, best_effort=True),
            ),
            pools=(PoolCapacity("p0", 4),),
            held_gpus={"old": {"p0": 4}},
        )

    for frees_room, want in (
        (False, {"old": "keep", "new": "defer"}),
        (True, {"old": "shrink", "new": "serve"}),
    ):
        p = problem(frees_room)
        assert dict(select(p, **EXACT).chosen) == want
        assert check(p, want) == []
        assert check(p, greedy(p).chosen) == []  # the greedy start need not find the room


def test_a_warm_start_highs_does_not_improve_on_is_not_taken_as_optimal() -> None:
    # Found by the property test above: HiGHS handed the greedy start (objective -1) back as
    # "optimal" with a bound of 0; the optimum scales j0 in so that j2 fits the quota.
    cands = (
        Candidate("j0", "keep", "keep", 0.0, {"p0": 2}),
        Candidate("j0", "c0", "reconfigure", 0.0, {"p0": 1}, changes=True),
        Candidate("j1", "defer", "defer", -3.0, {}),
        Candidate("j1", "c0", "place", -2.0, {"p0": 2}),
        Candidate("j1", "c1", "place", -1.0, {"p0": 2, "p1": 1}),
        Candidate("j1", "c2", "place", 0.0, {"p0": 2, "p1": 2}),
        Candidate("j2", "defer", "defer", -1.0, {}),
        Candidate("j2", "c0", "place", 0.0, {"p1": 4}),
    )
    p = SelectionProblem(
        candidates=cands,
        pools=(PoolCapacity("p0", 5), PoolCapacity("p1", 6)),
        quota_group={"j0": "b", "j1": "b", "j2": "b"},
        quota_caps={"b": 9},
        held_gpus={"j0": {"p0": 2}},
    )
    sel = select(p, **EXACT)
    assert brute_force(p) == 0.0
    assert sel.objective == pytest.approx(0.0, abs=1e-9)
    assert dict(sel.chosen) == {"j0": "c0", "j1": "c2", "j2": "c0"}


@settings(max_examples=30, deadline=None)
@given(p=problems(max_jobs=5, max_cands=4))
def test_highspy_agrees_with_scipy_milp(p: SelectionProblem) -> None:
    from scipy.optimize import Bounds, LinearConstraint, milp

    m = formulate(compile_problem(p, SelectorConfig()))
    res = milp(
        -m.c,
        constraints=LinearConstraint(m.A, m.row_lo, m.row_hi),
        bounds=Bounds(m.col_lo, m.col_hi),
        integrality=m.integrality,
        options={"mip_rel_gap": 0.0},
    )
    if res.status != 0:
        with pytest.raises(InfeasibleError):
            select(p, **EXACT)
        return
    assert select(p, **EXACT).objective == pytest.approx(-res.fun, abs=1e-6)


@settings(max_examples=20, deadline=None)
@given(p=problems(max_jobs=4, max_cands=4))
def test_pruning_never_changes_the_optimum(p: SelectionProblem) -> None:
    full = formulate(compile_problem(p, SelectorConfig(prune_dominated=False)))
    pruned = formulate(compile_problem(p, SelectorConfig()))
    from scipy.optimize import Bounds, LinearConstraint, milp

    def solve(m: object) -> float | None:
        r = milp(
            -m.c,  # type: ignore[attr-defined]
            constraints=LinearConstraint(m.A, m.row_lo, m.row_hi),  # type: ignore[attr-defined]
            bounds=Bounds(m.col_lo, m.col_hi),  # type: ignore[attr-defined]
            integrality=m.integrality,  # type: ignore[attr-defined]
            options={"mip_rel_gap": 0.0},
        )
        return None if r.status != 0 else -r.fun

    a, b = solve(full), solve(pruned)
    assert (a is None) == (b is None)
    if a is not None:
        assert a == pytest.approx(b, abs=1e-6)


@st.composite
def problems_with_copies(draw: st.DrawFn) -> SelectionProblem:
    """A random problem plus copies of some of its jobs: same candidates, priority, quota group
    and held GPUs under another name (tenants on one service tier)."""
    p = draw(problems(max_jobs=3, max_cands=3))
    jobs = _jobs(p)
    cands = list(p.candidates)
    priority, group, held = dict(p.priority), dict(p.quota_group), dict(p.held_gpus)
    for job in draw(st.lists(st.sampled_from(sorted(jobs)), min_size=1, max_size=3)):
        copy = f"{job}-copy{len(priority)}"
        cands += [attrs.evolve(c, job_id=copy) for c in jobs[job]]
        priority[copy] = p.priority[job]
        group[copy] = p.quota_group[job]
        if job in p.held_gpus:
            held[copy] = dict(p.held_gpus[job])
    return attrs.evolve(p, candidates=cands, priority=priority, quota_group=group, held_gpus=held)


@settings(max_examples=60, deadline=None)
@given(p=problems_with_copies())
def test_merging_identical_jobs_keeps_the_optimum_and_shrinks_the_milp(
    p: SelectionProblem,
) -> None:
    best = brute_force(p)
    plain = SelectorConfig(merge_identical=False)
    if best == -math.inf:
        with pytest.raises(InfeasibleError):
            select(p, **EXACT)
        return
    sel = select(p, **EXACT)
    assert check(p, sel.chosen) == []
    assert sel.objective == pytest.approx(best, abs=1e-6)
    assert select(p, **EXACT, cfg=plain).objective == pytest.approx(best, abs=1e-6)
    comp = compile_problem(p, SelectorConfig())
    from koi.selector._merge import job_classes

    classes = job_classes(comp)
    assert len(classes) < comp.n_jobs  # the copies were recognised
    merged, separate = formulate(comp, classes), formulate(comp)
    assert merged.n_x < separate.n_x


def test_merged_copies_split_between_options_in_job_order() -> None:
    """Three identical jobs, room on the fast pool for two: two take it, the third the slow
    one, and the first two by name get the fast pool."""
    pools = [PoolCapacity("fast", 4), PoolCapacity("slow", 8)]
    cands = [
        c
        for job in ("t0", "t1", "t2")
        for c in (
            Candidate(job, "defer", "defer", -10.0),
            Candidate(job, "fast", "place", -1.0, {"fast": 2}),
            Candidate(job, "slow", "place", -2.0, {"slow": 2}),
        )
    ]
    sel = select(SelectionProblem(candidates=cands, pools=pools), **EXACT)
    assert sel.chosen == {"t0": "fast", "t1": "fast", "t2": "slow"}
    assert sel.objective == pytest.approx(-4.0)


# --- each term changes a decision -------------------------------------------------------------

CFG = ScoringConfig()


def _model() -> ModelSpec:
    return ModelSpec("Llama-3.1-70B", 70.6, 70.6, 80, 8192, 64, 8, 128, 28672, 128256, 131072)


def _job(job_id: str = "chat", priority: int = 0) -> Job:
    w = WorkloadProfile(LengthDist(512), LengthDist(128), rate_rps=4.0)
    target = ServingTarget.online(p99_ttft_ms=800, p99_tpot_ms=60)
    return Job(job_id, "Llama-3.1-70B", "online", w, target, priority=priority)


def _ladder(gpu: str, tp: int, replicas: int, price: float) -> Ladder:
    e = Environment("gcp", "us-central1", "on_demand", f"{gpu}-x8", gpu, 8, price)
    return Ladder((Rank(Chain("Llama-3.1-70B", e, Config(tp=tp)), replicas),))


def _j(job: Job, y: Outcomes) -> float:
    s = Normalizer.for_job(job, reference_cost_per_mtok=2.0)
    return tchebycheff(job, y, z_star=ideal_point(job, s), scales=s, rho=CFG.rho)


def test_switching_cost_keeps_a_job_on_its_ladder() -> None:
    job = _job()
    old = _ladder("H100-SXM", 4, 2, 32.0)
    new = _ladder("H100-SXM", 8, 1, 32.0)
    y_old = Outcomes(1.90, 500.0, 40.0, 700.0, 0.33)
    y_new = Outcomes(1.80, 450.0, 35.0, 700.0, 0.41)  # slightly better on paper
    j_old, j_new = _j(job, y_old), _j(job, y_new)
    assert j_new > j_old
    sw = switching_cost(old, new, model=_model(), breach_probability=0.02, in_flight_requests=40)
    pools = [PoolCapacity(old.ranks[0].chain.environment.id, 32, 8)]
    pid = pools[0].pool_id
    held = {"chat": {pid: 8}}

    def problem(lam: float) -> SelectionProblem:
        return SelectionProblem(
            candidates=[
                Candidate("chat", "keep", "keep", candidate_value(j_old, 0.02, 0.0), {pid: 8}),
                Candidate(
                    "chat",
                    "tp8",
                    "reconfigure",
                    candidate_value(j_new, 0.02, sw.score(CFG), lam=lam),
                    {pid: 8},
                    changes=True,
                ),
            ],
            pools=pools,
            held_gpus=held,
        )

    assert select(problem(0.0), **EXACT).chosen["chat"] == "tp8"
    assert select(problem(CFG.lambda_switch), **EXACT).chosen["chat"] == "keep"


def test_exploration_picks_an_untested_stratum() -> None:
    job = _job()
    y_known = Outcomes(1.90, 500.0, 40.0, 700.0, 0.35)
    y_new = Outcomes(1.95, 500.0, 40.0, 700.0, 0.35)  # a bit dearer, on an untested GPU
    tested, untested = ("kv->ttft", "H100"), ("kv->ttft", "MI300X")
    u = {tested: 0.05, untested: 1.0}
    pools = [PoolCapacity("h100", 8, 8), PoolCapacity("mi300x", 8, 8)]

    def problem(beta: float) -> SelectionProblem:
        return SelectionProblem(
            candidates=[
                Candidate("chat", "defer", "defer", deferral_score(job, CFG)),
                Candidate("chat", "h100", "place", _j(job, y_known), {"h100": 8}, {tested}),
                Candidate("chat", "mi300x", "place", _j(job, y_new), {"mi300x": 8}, {untested}),
            ],
            pools=pools,
            exploration_weights={e: beta * v for e, v in u.items()},
        )

    assert select(problem(0.0), **EXACT).chosen["chat"] == "h100"
    assert select(problem(CFG.beta), **EXACT).chosen["chat"] == "mi300x"


def test_breach_penalty_rejects_a_cheaper_risky_ladder() -> None:
    job = _job()
    safe = Outcomes(2.0, 600.0, 45.0, 700.0, 0.25)
    risky = Outcomes(1.6, 760.0, 57.0, 700.0, 0.05)  # cheaper, close to the bounds
    j_safe, j_risky = _j(job, safe), _j(job, risky)
    assert j_risky > j_safe
    pools = [PoolCapacity("a", 16, 8)]

    def problem(gamma: float) -> SelectionProblem:
        cfg = ScoringConfig(gamma=gamma)
        return SelectionProblem(
            candidates=[
                Candidate("chat", "defer", "defer", deferral_score(job, cfg)),
                Candidate(
                    "chat", "safe", "place", candidate_value(j_safe, 0.03, 0.0, cfg=cfg), {"a": 8}
                ),
                Candidate(
                    "chat", "risky", "place", candidate_value(j_risky, 0.35, 0.0, cfg=cfg), {"a": 4}
                ),
            ],
            pools=pools,
        )

    assert select(problem(0.0), **EXACT).chosen["chat"] == "risky"
    assert select(problem(CFG.gamma), **EXACT).chosen["chat"] == "safe"


def test_priority_rule_makes_a_low_priority_job_yield() -> None:
    hi, lo = _job("vip", priority=2), _job("bulk", priority=0)
    y = Outcomes(2.0, 500.0, 40.0, 700.0, 0.3)
    pools = [PoolCapacity("a", 8, 8)]
    cands = [
        Candidate("vip", "defer", "defer", -1.5),  # a host may make deferral cheap...
        Candidate("vip", "place", "place", _j(hi, y), {"a": 8}),
        Candidate("bulk", "defer", "defer", deferral_score(lo, CFG)),
        Candidate("bulk", "place", "place", _j(lo, y) + 0.5, {"a": 8}),
    ]
    free = SelectionProblem(candidates=cands, pools=pools)
    assert select(free, **EXACT).chosen == {"vip": "defer", "bulk": "place"}
    ranked = SelectionProblem(candidates=cands, pools=pools, priority={"vip": 2, "bulk": 0})
    sel = select(ranked, **EXACT)
    assert sel.chosen == {"vip": "place", "bulk": "defer"}  # ...C5 still makes bulk yield
    assert "capacity[a]" in sel.binding
    assert greedy(ranked).chosen == sel.chosen


def test_quota_swap_budget_and_make_before_break_bind() -> None:
    pools = [PoolCapacity("a", 12, 4)]
    cands = [
        Candidate("x", "keep", "keep", -2.0, {"a": 4}),
        Candidate("x", "grow", "reconfigure", -1.0, {"a": 8}, changes=True),
        Candidate("y", "keep", "keep", -2.0, {"a": 4}),
        Candidate("y", "grow", "reconfigure", -1.0, {"a": 4}, changes=True),
    ]
    held = {"x": {"a": 4}, "y": {"a": 4}}
    base = SelectionProblem(candidates=cands, pools=pools, held_gpus=held)
    # Make-before-break: x's switch needs 4 held + 8 new = 12 GPUs at once, y's 8: only one fits.
    sel = select(base, **EXACT)
    assert sorted(sel.chosen.values()).count("grow") == 1
    assert "capacity[a]" in sel.binding
    loose = select(base, cfg=SelectorConfig(make_before_break=False), **EXACT)
    assert loose.chosen == {"x": "grow", "y": "grow"}
    budget = SelectionProblem(
        candidates=cands, pools=[PoolCapacity("a", 40, 4)], held_gpus=held, swap_budget=1
    )
    s = select(budget, **EXACT)
    assert sorted(s.chosen.values()) == ["grow", "keep"]
    assert "swap_budget" in s.binding
    quota = SelectionProblem(
        candidates=cands,
        pools=[PoolCapacity("a", 40, 4)],
        held_gpus=held,
        quota_group={"x": "t", "y": "t"},
        quota_caps={"t": 8},
    )
    q = select(quota, **EXACT)
    assert q.chosen == {"x": "keep", "y": "grow"}
    assert "quota[t]" in q.binding
    # A quota lowered below what the group holds (8): keeping stays possible, growing does not
    # (y's "grow" moves without adding GPUs).
    shrunk = select(attrs.evolve(quota, quota_caps={"t": 2}), **EXACT)
    assert shrunk.chosen == {"x": "keep", "y": "grow"}
    assert "quota[t]" in shrunk.binding


def test_best_effort_takes_only_what_nobody_holds() -> None:
    # "keeper" meets its target on 8 GPUs and could give 4 up within it ("shrink"); "hopeless"
    # has only best-effort ladders.  A plain candidate may take the GPUs a shrink frees; a
    # best-effort one may not, however much it would gain.
    pools = [PoolCapacity("a", 10, 1)]
    held = {"keeper": {"a": 8}}

    def problem(*, best_effort: bool) -> SelectionProblem:
        return SelectionProblem(
            candidates=[
                Candidate("keeper", "keep", "keep", -1.0, {"a": 8}),
                Candidate(
                    "keeper",
                    "shrink",
                    "reconfigure",
                    -1.1,
                    {"a": 4},
                    changes=True,
                    transient_gpus_by_pool={"a": 4},
                ),
                Candidate("hopeless", "defer", "defer", -20.0),
                Candidate("hopeless", "small", "place", -6.0, {"a": 2}, best_effort=best_effort),
                Candidate("hopeless", "big", "place", -3.0, {"a": 6}, best_effort=best_effort),
            ],
            pools=pools,
            held_gpus=held,
        )

    plain = select(problem(best_effort=False), **EXACT)
    assert plain.chosen == {"keeper": "shrink", "hopeless": "big"}
    guarded = select(problem(best_effort=True), **EXACT)
    assert guarded.chosen == {"keeper": "keep", "hopeless": "small"}
    assert "free[a]" in guarded.binding
    assert greedy(problem(best_effort=True)).chosen == guarded.chosen


def test_a_running_job_counts_only_its_growth_against_the_free_gpus() -> None:
    # "hot" runs on 2 of pool a's 10 GPUs, "keeper" holds 6: 2 are free.  Growing "hot" to 4
    # takes 2 free GPUs (allowed); to 5 it would take 3 (not), though 5 fits the pool.
    pools = [PoolCapacity("a", 10, 1)]
    held = {"keeper": {"a": 6}, "hot": {"a": 2}}
    problem = SelectionProblem(
        candidates=[
            Candidate("keeper", "keep", "keep", -1.0, {"a": 6}),
            Candidate("hot", "keep", "keep", -20.0, {"a": 2}),
            Candidate(
                "hot",
                "four",
                "reconfigure",
                -8.0,
                {"a": 4},
                changes=True,
                transient_gpus_by_pool={"a": 4},
                best_effort=True,
            ),
            Candidate(
                "hot",
                "five",
                "reconfigure",
                -5.0,
                {"a": 5},
                changes=True,
                transient_gpus_by_pool={"a": 5},
                best_effort=True,
            ),
        ],
        pools=pools,
        held_gpus=held,
    )
    chosen = select(problem, **EXACT)
    assert chosen.chosen == {"keeper": "keep", "hot": "four"}
    assert greedy(problem).chosen == chosen.chosen


# --- results, errors and fallback -------------------------------------------------------------


def _tiny() -> SelectionProblem:
    return SelectionProblem(
        candidates=[
            Candidate("a", "defer", "defer", -5.0),
            Candidate("a", "p", "place", -1.0, {"x": 2}),
        ],
        pools=[PoolCapacity("x", 4, 2)],
    )


def test_selection_is_plain_koi_data() -> None:
    sel = select(_tiny())
    assert sel.chosen == {"a": "p"}
    assert isinstance(sel.objective, float)
    assert isinstance(sel.bound, float)
    assert sel.gap == pytest.approx(0.0)
    assert sel.solve_time_s >= 0
    for field in (sel.status, sel.chosen, sel.binding, sel.message):
        assert "highspy" not in type(field).__module__


def test_greedy_is_the_fallback_and_reports_unknown_bound() -> None:
    g = greedy(_tiny())
    assert g.status is SelectionStatus.GREEDY_FALLBACK
    assert g.bound == math.inf
    assert g.chosen == {"a": "p"}


def test_infeasible_plan_raises() -> None:
    p = SelectionProblem(
        candidates=[Candidate("a", "keep", "keep", -1.0, {"x": 8})],
        pools=[PoolCapacity("x", 4, 4)],
        held_gpus={"a": {"x": 8}},
    )
    with pytest.raises(InfeasibleError):
        select(p)
    with pytest.raises(InfeasibleError):
        greedy(p)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pools": [PoolCapacity("x", 4), PoolCapacity("x", 2)]}, "duplicate pool_id"),
        ({"pools": []}, "unknown pool"),
        ({"swap_budget": -1}, "swap_budget"),
        ({"priority": {"ghost": 1}}, "no candidate"),
        ({"exploration_weights": {"e": -1.0}}, "exploration_weights"),
        ({"quota_caps": {"g": -3}}, "quota_caps"),
    ],
)
def test_invalid_problems_raise(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {
        "candidates": [
            Candidate("a", "defer", "defer", -5.0),
            Candidate("a", "p", "place", -1.0, {"x": 2}),
        ],
        "pools": [PoolCapacity("x", 4, 2)],
    }
    base.update(kwargs)
    with pytest.raises(InvalidInput, match=match):
        select(SelectionProblem(**base))  # type: ignore[arg-type]


def test_invalid_candidates_and_limits_raise() -> None:
    with pytest.raises(InvalidInput, match="value"):
        Candidate("a", "k", "place", math.nan)
    with pytest.raises(InvalidInput, match="kind"):
        Candidate("a", "k", "teleport", 0.0)
    with pytest.raises(InvalidInput, match="time_limit_s"):
        select(_tiny(), time_limit_s=0.0)
    with pytest.raises(InvalidInput, match="mip_rel_gap"):
        select(_tiny(), mip_rel_gap=1.5)
    dup = [Candidate("a", "p", "defer", -1.0), Candidate("a", "p", "place", -1.0, {"x": 1})]
    with pytest.raises(InvalidInput, match="duplicate key"):
        select(SelectionProblem(candidates=dup, pools=[PoolCapacity("x", 4)]))


def _random_instance(n_jobs: int, n_cands: int, n_pools: int, seed: int) -> SelectionProblem:
    rng = np.random.default_rng(seed)
    cands: list[Candidate] = []
    for j in range(n_jobs):
        cands.append(Candidate(f"j{j}", "defer", "defer", -float(rng.uniform(2, 8))))
        for k in range(n_cands):
            pool = f"p{int(rng.integers(n_pools))}"
            cands.append(
                Candidate(
                    f"j{j}",
                    f"c{k}",
                    "place",
                    -float(rng.uniform(0.5, 3)),
                    {pool: int(rng.choice([1, 2, 4, 8]))},
                    {("e", int(rng.integers(30)))},
                )
            )
    pools = [PoolCapacity(f"p{i}", 16, 8) for i in range(n_pools)]
    weights: dict[Hashable, float] = {("e", i): 0.1 for i in range(30)}
    return SelectionProblem(candidates=cands, pools=pools, exploration_weights=weights)


def test_lp_fixing_path_matches_plain_solve() -> None:
    p = _random_instance(60, 40, 12, seed=3)
    # No wall-clock limit: on a busy machine a timed-out solve would differ for no reason.
    plain = select(p, cfg=SelectorConfig(lp_fix=False, time_limit_s=None), mip_rel_gap=1e-6)
    fixed = select(
        p, cfg=SelectorConfig(lp_fix_min_candidates=10, time_limit_s=None), mip_rel_gap=1e-6
    )
    assert fixed.objective == pytest.approx(plain.objective, rel=1e-6)
    assert fixed.pruned > 0


def _sorted(xs: Sequence[str]) -> list[str]:
    return sorted(xs)


@settings(max_examples=30, deadline=None)
@given(p=problems())
def test_the_milp_does_not_depend_on_the_order_exploration_items_come_in(
    p: SelectionProblem,
) -> None:
    # The planner's items follow the iteration of sets of strings, which hash randomization
    # changes from one interpreter to the next: the same problem must give the same MILP.
    weights = list(p.exploration_weights.items())
    reordered = attrs.evolve(p, exploration_weights=dict(reversed(weights)))
    a, b = (formulate(compile_problem(q, SelectorConfig())) for q in (p, reordered))
    assert a.row_names == b.row_names
    assert np.array_equal(a.c, b.c)
    assert np.array_equal(a.A.toarray(), b.A.toarray())
    assert np.array_equal(a.row_lo, b.row_lo)
    assert np.array_equal(a.row_hi, b.row_hi)
