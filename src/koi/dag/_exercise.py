"""Which edges a deployed rank exercises (DESIGN §4.2).

A rank exercises an X -> V edge when it *sets* the edge's decision to something that makes
the mechanism act, and a V -> Y edge when it exercises some X -> V edge into that mediator:

=====================  ========================================================
decision               set when
=====================  ========================================================
gpu_type, engine       always (every rank runs on some GPU under some engine)
max_batch_size         always (the engine always enforces a cap)
max_batched_tokens     always (the chunked-prefill budget always applies)
interconnect           the chain spans more than one GPU (tp * pp > 1)
tp                     tp > 1
pp                     pp > 1
quant                  quant != bf16
replicas, routing      replicas > 1
market                 the environment is spot (only spot capacity is reclaimed)
=====================  ========================================================

So a TP=1 BF16 single replica teaches nothing about communication, quantisation or
routing, and exploration rewards trying an untested TP degree, quantisation or GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from koi.beliefs import EdgeKey, Stratum, stratum_of
from koi.dag._graph import CausalDag, default_dag
from koi.dag._nodes import Decision, node_name
from koi.errors import InvalidInput
from koi.types import Chain, Ladder, Market, ModelSpec, Quant, Rank

__all__ = ["exercised_decisions", "exercised_edges", "exercised_keys"]


def exercised_decisions(chain: Chain, replicas: int) -> frozenset[Decision]:
    """The decisions a rank of ``replicas`` copies of ``chain`` sets (table above)."""
    cfg = chain.config
    out = {
        Decision.GPU_TYPE,
        Decision.ENGINE,
        Decision.MAX_BATCH_SIZE,
        Decision.MAX_BATCHED_TOKENS,
    }
    if cfg.gpus > 1:
        out.add(Decision.INTERCONNECT)
    if cfg.tp > 1:
        out.add(Decision.TP)
    if cfg.pp > 1:
        out.add(Decision.PP)
    if cfg.quant is not Quant.BF16:
        out.add(Decision.QUANT)
    if replicas > 1:
        out.update((Decision.REPLICAS, Decision.ROUTING))
    if chain.environment.market is Market.SPOT:
        out.add(Decision.MARKET)
    return frozenset(out)


def exercised_edges(
    chain: Chain, replicas: int, *, dag: CausalDag | None = None
) -> frozenset[EdgeKey]:
    """Registered edges a rank exercises: X -> V from set decisions, then V -> Y onward."""
    dag = default_dag() if dag is None else dag
    return _edges_from(exercised_decisions(chain, replicas), dag)


@functools.lru_cache(maxsize=4096)
def _edges_from(decisions: frozenset[Decision], dag: CausalDag) -> frozenset[EdgeKey]:
    # Only a few dozen decision sets occur; the planner asks thousands of times per tick.
    edges: set[EdgeKey] = set()
    for decision in decisions:
        x = node_name(decision)
        for v in dag.children(x):
            edges.add((x, v))
            edges.update((v, y) for y in dag.children(v))
    return frozenset(edges)


def exercised_keys(
    ladder: Ladder | Rank, models: Mapping[str, ModelSpec], *, dag: CausalDag | None = None
) -> frozenset[tuple[EdgeKey, Stratum]]:
    """Stratified ``(edge, stratum)`` pairs a ladder (or one rank) exercises.

    ``models`` maps model names to specs (for the stratum's model class).  These are the
    keys exploration counts once per plan.
    """
    ranks = (ladder,) if isinstance(ladder, Rank) else ladder.ranks
    out: set[tuple[EdgeKey, Stratum]] = set()
    for rank in ranks:
        spec = models.get(rank.chain.model)
        if spec is None:
            raise InvalidInput(f"models: no spec for {rank.chain.model!r}")
        stratum = stratum_of(rank.chain, spec)
        out.update((e, stratum) for e in exercised_edges(rank.chain, rank.replicas, dag=dag))
    return frozenset(out)
