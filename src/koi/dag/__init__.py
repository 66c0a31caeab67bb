"""The causal DAG X -> V -> Y: registered edges, backward queries, scopes and mechanisms.

Paper §2.3, DESIGN §4.1–4.3.  Node names are ``"x:<decision>"``, ``"v:<mediator>"`` and
``"y:<outcome>"``; an edge is an :data:`EdgeKey` ``(parent, child)``.
"""

from __future__ import annotations

from koi.beliefs import EdgeKey
from koi.dag._exercise import exercised_decisions, exercised_edges, exercised_keys
from koi.dag._graph import BackwardPath, CausalDag, DagView, EdgeView, default_dag
from koi.dag._mechanism import (
    Admission,
    Mechanism,
    MechanismProposal,
    admit_mechanism,
    mechanism_id,
)
from koi.dag._nodes import Decision, NodeKind, node_kind, node_name, node_value
from koi.dag._registry import REGISTERED_EDGES
from koi.dag._scope import Predicate, RankContext, Scope

__all__ = [
    "REGISTERED_EDGES",
    "Admission",
    "BackwardPath",
    "CausalDag",
    "DagView",
    "Decision",
    "EdgeKey",
    "EdgeView",
    "Mechanism",
    "MechanismProposal",
    "NodeKind",
    "Predicate",
    "RankContext",
    "Scope",
    "admit_mechanism",
    "default_dag",
    "exercised_decisions",
    "exercised_edges",
    "exercised_keys",
    "mechanism_id",
    "node_kind",
    "node_name",
    "node_value",
]
