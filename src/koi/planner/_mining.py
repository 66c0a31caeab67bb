"""The default proposer's mechanism miner: persistent residual patterns become hypotheses.

When CUSUM declares that, in one stratum, a mediator and an outcome it feeds both diverged
(the Q4 pattern), the miner proposes the mechanism "the decisions this rank set move that
mediator, which moves that outcome" scoped to what characterises the rank: its model class and,
for tensor-parallel ranks, its interconnect and TP degree (that is where communication-bound
surprises live), otherwise its GPU type.  Admission (:func:`koi.dag.admit_mechanism`) still
decides; the miner only proposes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from koi.dag import (
    CausalDag,
    MechanismProposal,
    NodeKind,
    Scope,
    exercised_decisions,
    node_name,
)
from koi.types import GpuSpec, ModelSpec, Rank

__all__ = ["mine_mechanisms"]


def mine_mechanisms(
    divergences: Iterable[tuple[str, str]],
    examples: Mapping[str, Rank],
    *,
    dag: CausalDag,
    gpus: Mapping[str, GpuSpec],
    models: Mapping[str, ModelSpec],
) -> list[MechanismProposal]:
    """Proposals from this tick's ``(stratum key, variable)`` divergences."""
    by_stratum: dict[str, set[str]] = {}
    for stratum, variable in divergences:
        by_stratum.setdefault(stratum, set()).add(variable)
    mediators = set(dag.nodes(NodeKind.V))
    proposals: list[MechanismProposal] = []
    for stratum, variables in sorted(by_stratum.items()):
        rank = examples.get(stratum)
        if rank is None:
            continue
        spec = models.get(rank.chain.model)
        gpu = gpus.get(rank.chain.environment.gpu)
        if spec is None or gpu is None:
            continue
        decisions = {node_name(d) for d in exercised_decisions(rank.chain, rank.replicas)}
        for v_var in sorted(variables):
            v = f"v:{v_var}"
            if v not in mediators:
                continue
            outcomes = sorted(y for y in dag.children(v) if y.split(":", 1)[1] in variables)
            parents = sorted(x for x in dag.parents(v) if x in decisions)
            if not outcomes or not parents:
                continue
            edges = [(x, v) for x in parents] + [(v, y) for y in outcomes]
            config = rank.chain.config
            if config.tp > 1:
                scope = f"size_class == {spec.size_class} and interconnect == {gpu.link.value}"
                scope += f" and tp >= {config.tp}"
            else:
                scope = f"size_class == {spec.size_class} and gpu == {gpu.name}"
            statement = (
                f"On {scope.replace(' and ', ', ')}, {', '.join(p[2:] for p in parents)} "
                f"shift {v_var}, which moves {', '.join(y[2:] for y in outcomes)} "
                "beyond the surrogate's prediction."
            )
            proposals.append(MechanismProposal(tuple(edges), Scope.parse(scope), statement))
    return proposals
