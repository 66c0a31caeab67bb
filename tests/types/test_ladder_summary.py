"""Ladder.summary: the one line `koi plan` and `koi agent` print for a deployment."""

from __future__ import annotations

from koi.testing.fakes import example_pools
from koi.types import Chain, Config, Engine, Ladder, Quant, Rank, Routing


def test_summary_names_every_rank_with_its_pool_engine_shape_and_batch() -> None:
    a, b = example_pools()[:2]
    ladder = Ladder(
        (
            Rank(Chain("Llama-3.1-8B", a.environment, Config(tp=2, max_batch_size=64)), 3),
            Rank(
                Chain(
                    "Llama-3.1-8B",
                    b.environment,
                    Config(engine=Engine.SGLANG, quant=Quant.FP8, max_batch_size=32),
                ),
                1,
            ),
        )
    )
    assert ladder.summary() == (
        f"3x {a.environment.id} vllm tp2 pp1 bf16 batch64 + "
        f"1x {b.environment.id} sglang tp1 pp1 fp8 batch32"
    )


def test_an_empty_ladder_reads_as_a_dash() -> None:
    assert Ladder().summary() == "-"


def test_a_routed_rank_names_its_routing() -> None:
    a = example_pools()[0]
    chain = Chain("Llama-3.1-8B", a.environment, Config(routing=Routing.PREFIX_AFFINITY))
    assert Ladder((Rank(chain, 2),)).summary().endswith(" batch256 prefix_affinity")
    assert Ladder((Rank(chain, 1),)).summary().endswith(" batch256")  # nothing to route
