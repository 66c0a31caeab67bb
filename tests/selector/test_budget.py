"""Budget books: one cvxpy LP built once, re-solved with new parameter values."""

from __future__ import annotations

import pytest

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


def test_model_is_built_once_and_resolved_with_new_values() -> None:
    books = BudgetBooks()
    first = books.solve([JobDemand("a", {"h100": 8, "l4": 8}, {"h100": 1.0, "l4": 0.1})], POOLS)
    second = books.solve([JobDemand("a", {"h100": 8, "l4": 8}, {"h100": 0.1, "l4": 1.0})], POOLS)
    assert books.builds == 1
    assert books.solves == 2
    assert first["a"].pools[0] == "h100"
    assert second["a"].pools[0] == "l4"


def test_extra_pools_widen_the_book() -> None:
    demand = [
        JobDemand("a", {"h100": 8, "l40s": 8, "l4": 8}, {"h100": 1.0, "l40s": 0.5, "l4": 0.2})
    ]
    narrow = BudgetBooks(BudgetConfig(extra_pools=0)).solve(demand, POOLS)["a"]
    wide = BudgetBooks(BudgetConfig(extra_pools=1)).solve(demand, POOLS)["a"]
    assert narrow.pools == ("h100",)
    assert wide.pools == ("h100", "l40s")


def test_growing_instance_rebuilds_and_bad_input_raises() -> None:
    books = BudgetBooks()
    books.solve([JobDemand("a", {"l4": 4}, {"l4": 1.0})], POOLS)
    many = [JobDemand(f"j{i}", {"l4": 4}, {"l4": 1.0}) for i in range(12)]
    out = books.solve(many, POOLS)
    assert books.builds == 2  # the padded 8-job model was replaced by a larger one
    assert sum(1 for b in out.values() if "l4" in b.pools) == 12
    with pytest.raises(InvalidInput, match="unknown pool"):
        books.solve([JobDemand("a", {"zz": 1}, {})], POOLS)
    with pytest.raises(InvalidInput, match="gpus_needed"):
        JobDemand("a", {"h100": -1}, {})
    assert books.solve([], POOLS) == {}
