"""Budget books: the root LP over usable (job, pool) pairs, solved by HiGHS."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from koi.errors import InvalidInput
from koi.selector import BudgetBooks, BudgetConfig, JobDemand, PoolCapacity

POOLS = [
    PoolCapacity("h100", 16, 8, 31.0, "H100-SXM"),
    PoolCapacity("l40s", 8, 8, 11.0, "L40S"),
    PoolCapacity("l4", 8, 4, 3.0, "L4"),
]


def test_books_follow_the_lp_and_respect_capacity() -> None:
    books = BudgetBooks(BudgetConfig(extra_pools=0))
    demands = [
        JobDemand("big", {"h100": 16, "l40s": 40}, {"h100": 1.0, "l40s": 0.2}),
        JobDemand("small", {"h100": 2, "l40s": 4, "l4": 8}, {"h100": 0.5, "l40s": 0.6, "l4": 0.4}),
    ]
    out = books.solve(demands, POOLS)
    assert out["big"].pools[0] == "h100"
    assert out["big"].gpu_types[0] == "H100-SXM"
    assert "h100" not in out["small"].pools  # big needs the whole H100 pool
    assert out["small"].max_gpus >= 4
    assert out["big"].max_gpus == 20  # 16 GPUs × (1 + headroom 0.25)


def test_each_solve_follows_the_new_values() -> None:
    books = BudgetBooks()
    first = books.solve([JobDemand("a", {"h100": 8, "l4": 8}, {"h100": 1.0, "l4": 0.1})], POOLS)
    second = books.solve([JobDemand("a", {"h100": 8, "l4": 8}, {"h100": 0.1, "l4": 1.0})], POOLS)
    assert books.solves == 2
    assert first["a"].pools[0] == "h100"
    assert second["a"].pools[0] == "l4"


@pytest.mark.parametrize("seed", range(6))
def test_lp_optimum_matches_scipy_linprog(seed: int) -> None:
    """Differential check of the sparse LP against scipy's dense formulation of the same LP."""
    rng = np.random.default_rng(seed)
    pools = [PoolCapacity(f"p{k}", int(rng.integers(0, 40)), 8, 1.0, "G") for k in range(5)]
    demands = []
    for j in range(9):
        usable = [p.pool_id for p in pools if rng.random() < 0.6]
        demands.append(
            JobDemand(
                f"j{j}",
                {p: float(rng.integers(1, 24)) for p in usable},
                {p: float(rng.random()) for p in usable},
            )
        )
    col = {p.pool_id: k for k, p in enumerate(pools)}
    share = BudgetBooks._shares(demands, pools, col)
    n, w, mask = (np.zeros((9, 5)) for _ in range(3))
    for j, d in enumerate(demands):
        for p, g in d.gpus_needed.items():
            n[j, col[p]], w[j, col[p]], mask[j, col[p]] = g, g * d.value_per_gpu[p], 1.0
    a_jobs = np.kron(np.eye(9), np.ones(5))
    a_pools = np.hstack([np.diag(n[j]) for j in range(9)])
    ref = linprog(
        -w.ravel(),
        A_ub=np.vstack([a_jobs, a_pools]),
        b_ub=np.concatenate([np.ones(9), [p.capacity_gpus for p in pools]]),
        bounds=list(zip(np.zeros(45), mask.ravel(), strict=True)),
        method="highs",
    )
    assert ref.status == 0
    assert float((w * share).sum()) == pytest.approx(-ref.fun, rel=1e-7, abs=1e-9)
    assert np.all(share <= mask + 1e-9)
    assert np.all(share.sum(axis=1) <= 1 + 1e-9)
    assert np.all((n * share).sum(axis=0) <= [p.capacity_gpus + 1e-6 for p in pools])


def test_extra_pools_widen_the_book() -> None:
    demand = [
        JobDemand("a", {"h100": 8, "l40s": 8, "l4": 8}, {"h100": 1.0, "l40s": 0.5, "l4": 0.2})
    ]
    narrow = BudgetBooks(BudgetConfig(extra_pools=0)).solve(demand, POOLS)["a"]
    wide = BudgetBooks(BudgetConfig(extra_pools=1)).solve(demand, POOLS)["a"]
    assert narrow.pools == ("h100",)
    assert wide.pools == ("h100", "l40s")


def test_many_jobs_and_bad_input() -> None:
    books = BudgetBooks()
    books.solve([JobDemand("a", {"l4": 4}, {"l4": 1.0})], POOLS)
    many = [JobDemand(f"j{i}", {"l4": 4}, {"l4": 1.0}) for i in range(12)]
    out = books.solve(many, POOLS)
    assert sum(1 for b in out.values() if "l4" in b.pools) == 12
    with pytest.raises(InvalidInput, match="unknown pool"):
        books.solve([JobDemand("a", {"zz": 1}, {})], POOLS)
    with pytest.raises(InvalidInput, match="gpus_needed"):
        JobDemand("a", {"h100": -1}, {})
    assert books.solve([], POOLS) == {}
