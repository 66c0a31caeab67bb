"""Mechanisms: scoped X -> V -> Y hypotheses with their own Beta state, and their admission."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import attrs
import networkx as nx

from koi.beliefs import Beta, EdgeKey
from koi.dag._graph import CausalDag
from koi.dag._nodes import NodeKind, node_kind
from koi.dag._scope import RankContext, Scope
from koi.errors import InvalidInput, KoiError

__all__ = ["Admission", "Mechanism", "MechanismProposal", "admit_mechanism", "mechanism_id"]


def _edge_tuple(value: Iterable[Any]) -> tuple[EdgeKey, ...]:
    edges = []
    for item in value:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise InvalidInput(f"edges: each edge must be (parent, child), got {item!r}")
        if not all(isinstance(n, str) for n in item):
            raise InvalidInput(f"edges: node names must be text, got {item!r}")
        edges.append((item[0], item[1]))
    return tuple(sorted(set(edges)))


def _scope(value: Scope | str) -> Scope:
    return Scope.parse(value) if isinstance(value, str) else value


@attrs.frozen
class MechanismProposal:
    """What a proposer (default or LLM) sends: edges, a scope and a statement."""

    edges: tuple[EdgeKey, ...] = attrs.field(converter=_edge_tuple)
    scope: Scope = attrs.field(factory=Scope, converter=_scope)
    statement: str = ""


def mechanism_id(edges: Iterable[EdgeKey], scope: Scope) -> str:
    """A stable id from the edge set and the scope's canonical form."""
    text = repr((_edge_tuple(edges), scope.canonical()))
    return "m-" + hashlib.sha256(text.encode()).hexdigest()[:12]


@attrs.frozen
class Mechanism:
    """``m = (E_m, S_m, η_m, B_m)``: edges, scope, statement and belief (starts ``Beta(1,1)``)."""

    id: str
    edges: tuple[EdgeKey, ...] = attrs.field(converter=_edge_tuple)
    scope: Scope = attrs.field(converter=_scope)
    statement: str
    belief: Beta = attrs.field(factory=Beta.uniform)

    def applies_to(self, ctx: RankContext) -> bool:
        """Scope matching against a deployed rank."""
        return self.scope.matches(ctx)

    @property
    def mediators(self) -> tuple[str, ...]:
        return tuple(sorted({c for _, c in self.edges if node_kind(c) is NodeKind.V}))

    @property
    def outcomes(self) -> tuple[str, ...]:
        return tuple(sorted({c for _, c in self.edges if node_kind(c) is NodeKind.Y}))

    @property
    def decisions(self) -> tuple[str, ...]:
        return tuple(sorted({p for p, _ in self.edges if node_kind(p) is NodeKind.X}))

    def with_belief(self, belief: Beta) -> Mechanism:
        return attrs.evolve(self, belief=belief)

    def to_data(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "edges": [[u, v] for u, v in self.edges],
            "scope": self.scope.to_text(),
            "statement": self.statement,
            "alpha": self.belief.alpha,
            "beta": self.belief.beta,
        }

    @classmethod
    def from_data(cls, data: Any, *, where: str = "mechanism") -> Mechanism:
        try:
            return cls(
                id=str(data["id"]),
                edges=data["edges"],
                scope=Scope.parse(data["scope"]),
                statement=str(data["statement"]),
                belief=Beta(data["alpha"], data["beta"]),
            )
        except KeyError as exc:
            raise InvalidInput(f"{where}: required field {exc} missing") from None
        except (TypeError, KoiError) as exc:
            raise InvalidInput(f"{where}: {exc}") from None


@attrs.frozen
class Admission:
    """The admission decision: ``mechanism`` is set exactly when ``accepted``."""

    accepted: bool
    reason: str
    mechanism: Mechanism | None = None


def _path_problem(edges: tuple[EdgeKey, ...]) -> str | None:
    """Why ``edges`` is not a connected X -> V -> Y subgraph, or ``None`` if it is."""
    if not edges:
        return "no edges: a mechanism needs at least one X -> V -> Y path"
    into_v: dict[str, int] = {}
    out_of_v: dict[str, int] = {}
    for u, v in edges:
        ku, kv = node_kind(u), node_kind(v)
        if (ku, kv) == (NodeKind.X, NodeKind.V):
            into_v[v] = into_v.get(v, 0) + 1
        elif (ku, kv) == (NodeKind.V, NodeKind.Y):
            out_of_v[u] = out_of_v.get(u, 0) + 1
        else:
            return f"edge {u} -> {v} is {ku.name} -> {kv.name}, not X -> V or V -> Y"
    for v in sorted(set(into_v) | set(out_of_v)):
        if v not in out_of_v:
            return f"not an X -> V -> Y path: mediator {v} reaches no outcome"
        if v not in into_v:
            return f"not an X -> V -> Y path: no decision reaches mediator {v}"
    graph = nx.Graph(list(edges))
    if not nx.is_connected(graph):
        parts = sorted(sorted(c) for c in nx.connected_components(graph))
        return f"not connected: {len(parts)} separate parts ({parts[0][0]} … {parts[1][0]})"
    return None


def admit_mechanism(
    proposal: MechanismProposal, dag: CausalDag, existing: Iterable[Mechanism] = ()
) -> Admission:
    """Admit a proposed mechanism or say why not.

    Rejected, in this order: node names that do not parse; edges that are not registered in
    ``dag``; edge sets that are not a connected X -> V -> Y subgraph in which every mediator
    is reached by a decision and reaches an outcome; unsatisfiable scopes; duplicates of an
    ``existing`` mechanism (same edges and an equivalent scope).  An admitted mechanism
    starts at ``Beta(1, 1)``.
    """
    edges = proposal.edges
    try:
        for u, v in edges:
            node_kind(u)
            node_kind(v)
    except InvalidInput as exc:
        return Admission(accepted=False, reason=f"bad node name: {exc}")
    unregistered = [e for e in edges if e not in dag]
    if unregistered:
        listed = ", ".join(f"{u} -> {v}" for u, v in unregistered)
        return Admission(accepted=False, reason=f"unregistered edge(s): {listed}")
    problem = _path_problem(edges)
    if problem is not None:
        return Admission(accepted=False, reason=problem)
    canonical = proposal.scope.canonical()
    if canonical is None:
        return Admission(accepted=False, reason=f"unsatisfiable scope: {proposal.scope.to_text()}")
    for other in existing:
        if other.edges == edges and other.scope.canonical() == canonical:
            return Admission(accepted=False, reason=f"duplicate of mechanism {other.id}")
    mechanism = Mechanism(
        id=mechanism_id(edges, proposal.scope),
        edges=edges,
        scope=proposal.scope,
        statement=proposal.statement.strip(),
        belief=Beta.uniform(),
    )
    return Admission(accepted=True, reason="admitted", mechanism=mechanism)
