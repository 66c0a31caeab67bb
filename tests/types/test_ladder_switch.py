"""What a host holds while a ladder changes, and which changes only scale in."""

from __future__ import annotations

from koi.catalog import load_catalog
from koi.types import Chain, Config, Ladder, Quant, Rank

ENVS = [e for e in load_catalog().environments(clouds=["aws"]) if e.gpus_per_instance == 1][:2]
A = Chain("Llama-3.1-8B", ENVS[0], Config())
B = Chain("Llama-3.1-8B", ENVS[0], Config(quant=Quant.FP8))
C = Chain("Llama-3.1-8B", ENVS[1], Config())


def test_scale_in_is_fewer_replicas_of_the_same_chains() -> None:
    now = Ladder((Rank(A, 4), Rank(C, 2)))
    assert Ladder((Rank(A, 2), Rank(C, 2))).scales_in(now)
    assert Ladder((Rank(A, 4),)).scales_in(now)
    assert not now.scales_in(now)
    assert not Ladder((Rank(A, 5),)).scales_in(now)
    assert not Ladder((Rank(A, 1), Rank(B, 1))).scales_in(now)


def test_switch_peak_holds_leaving_chains_and_new_counts() -> None:
    now = Ladder((Rank(A, 4),))
    pool = ENVS[0].id
    assert Ladder((Rank(A, 2),)).switch_peak_by_pool(now) == {pool: 2}  # stops at once
    assert Ladder((Rank(A, 6),)).switch_peak_by_pool(now) == {pool: 6}  # adds beside
    assert Ladder((Rank(B, 2),)).switch_peak_by_pool(now) == {pool: 6}  # old drains
    moved = Ladder((Rank(C, 3),)).switch_peak_by_pool(now)
    assert moved == {pool: 4, ENVS[1].id: 3}
