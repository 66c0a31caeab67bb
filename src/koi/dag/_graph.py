"""The causal DAG: a frozen networkx graph of registered X -> V and V -> Y edges."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

import attrs
import networkx as nx

from koi.beliefs import EdgeKey
from koi.dag._nodes import Decision, NodeKind, node_kind, node_name, node_value
from koi.dag._registry import REGISTERED_EDGES
from koi.errors import CycleError, InvalidInput
from koi.types import Mediator, Outcome

__all__ = ["BackwardPath", "CausalDag", "DagView", "EdgeView", "default_dag"]

Confidence = Callable[[EdgeKey], float]

_ALLOWED = {(NodeKind.X, NodeKind.V), (NodeKind.V, NodeKind.Y)}


_UNTESTED = 0.5  # the mean of Beta(1, 1): nothing known


@attrs.frozen
class BackwardPath:
    """One decision -> mediator -> outcome route; ``confidence`` is the product over its edges."""

    decision: Decision
    mediator: Mediator
    outcome: Outcome
    confidence: float

    @property
    def edges(self) -> tuple[EdgeKey, EdgeKey]:
        x, v, y = node_name(self.decision), node_name(self.mediator), node_name(self.outcome)
        return (x, v), (v, y)


@attrs.frozen
class EdgeView:
    """One registered edge as a proposer sees it."""

    source: str
    target: str
    reason: str
    confidence: float | None = None
    uncertainty: float | None = None


@attrs.frozen
class DagView:
    """A read-only, JSON-able picture of the graph (``koi.types.to_json`` works on it)."""

    decisions: tuple[str, ...]
    mediators: tuple[str, ...]
    outcomes: tuple[str, ...]
    edges: tuple[EdgeView, ...]

    def edges_into(self, node: str) -> tuple[EdgeView, ...]:
        return tuple(e for e in self.edges if e.target == node)

    def edges_from(self, node: str) -> tuple[EdgeView, ...]:
        return tuple(e for e in self.edges if e.source == node)

    def backward(self, outcome: Outcome | str) -> tuple[BackwardPath, ...]:
        """Every decision -> mediator -> ``outcome`` path, most confident first: the backward
        query of paper §2.3, the only implementation in koi.

        A path's confidence is the product of its two edges' confidences (0.5, the mean of an
        untested ``Beta(1, 1)``, where the view carries none).  Ties are ordered by decision,
        then mediator.
        """
        target = outcome if isinstance(outcome, Outcome) else node_value(str(outcome))
        if not isinstance(target, Outcome):
            raise InvalidInput(f"outcome: must be a Y node or Outcome, got {outcome!r}")
        paths = []
        for vy in self.edges_into(node_name(target)):
            mediator = node_value(vy.source)
            for xv in self.edges_into(vy.source):
                decision = node_value(xv.source)
                assert isinstance(mediator, Mediator)
                assert isinstance(decision, Decision)
                c = _confidence_of(xv) * _confidence_of(vy)
                paths.append(BackwardPath(decision, mediator, target, c))
        paths.sort(key=lambda p: (-p.confidence, p.decision.value, p.mediator.value))
        return tuple(paths)

    def decisions_for(
        self, outcomes: Iterable[Outcome], min_confidence: float = 0.0
    ) -> tuple[tuple[Decision, float], ...]:
        """Decisions with a path to any of ``outcomes``, each with its best path's confidence;
        paths below ``min_confidence`` do not count.  Most confident first."""
        best: dict[Decision, float] = {}
        for outcome in outcomes:
            for path in self.backward(outcome):
                if path.confidence >= min_confidence:
                    best[path.decision] = max(path.confidence, best.get(path.decision, 0.0))
        return tuple(sorted(best.items(), key=lambda dc: (-dc[1], dc[0].value)))


def _confidence_of(edge: EdgeView) -> float:
    return _UNTESTED if edge.confidence is None else edge.confidence


def _check_edge(parent: str, child: str) -> None:
    kinds = (node_kind(parent), node_kind(child))
    if kinds not in _ALLOWED:
        msg = (
            f"edge {parent} -> {child}: only X -> V and V -> Y edges are allowed, "
            f"got {kinds[0].name} -> {kinds[1].name}"
        )
        raise CycleError(msg)


def _all_nodes() -> list[tuple[str, NodeKind]]:
    members: list[Decision | Mediator | Outcome] = [*Decision, *Mediator, *Outcome]
    return [(node_name(m), node_kind(node_name(m))) for m in members]


@attrs.frozen(eq=False)
class CausalDag:
    """Decisions X, mediators V and outcomes Y joined only by X -> V and V -> Y edges.

    Every node of the vocabulary is present; the edge set is fixed when the graph is built.
    The wrapped ``networkx.DiGraph`` is frozen, and :meth:`add_edge` returns a new graph, so a
    ``CausalDag`` never changes after construction.
    """

    _graph: nx.DiGraph = attrs.field(alias="graph")

    @classmethod
    def from_edges(cls, edges: Iterable[tuple[str, str, str]]) -> CausalDag:
        """Build a graph from ``(parent, child, reason)`` triples, validating each one."""
        graph = nx.DiGraph()
        for name, kind in _all_nodes():
            graph.add_node(name, kind=kind.value)
        for parent, child, reason in edges:
            _check_edge(parent, child)
            if not isinstance(reason, str) or not reason.strip():
                raise InvalidInput(f"edge {parent} -> {child}: reason must be a non-empty text")
            if graph.has_edge(parent, child):
                raise InvalidInput(f"edge {parent} -> {child}: registered twice")
            graph.add_edge(parent, child, reason=reason.strip())
        return cls(nx.freeze(graph))

    # --- structure ----------------------------------------------------------------------------
    @property
    def graph(self) -> nx.DiGraph:
        """The frozen networkx graph (mutating it raises ``NetworkXError``)."""
        return self._graph

    @property
    def edges(self) -> tuple[EdgeKey, ...]:
        """Registered edges, sorted."""
        return tuple(sorted((str(u), str(v)) for u, v in self._graph.edges))

    def __len__(self) -> int:
        return int(self._graph.number_of_edges())

    def __iter__(self) -> Iterator[EdgeKey]:
        return iter(self.edges)

    def __contains__(self, edge: object) -> bool:
        return isinstance(edge, tuple) and len(edge) == 2 and bool(self._graph.has_edge(*edge))

    def nodes(self, kind: NodeKind | None = None) -> tuple[str, ...]:
        """Node names, optionally of one kind, sorted."""
        return tuple(
            sorted(str(n) for n, k in self._graph.nodes(data="kind") if kind is None or k == kind)
        )

    def reason(self, edge: EdgeKey) -> str:
        """The physical reason recorded for a registered edge."""
        if edge not in self:
            raise InvalidInput(f"edge {edge[0]} -> {edge[1]}: not registered")
        return str(self._graph.edges[edge]["reason"])

    def parents(self, node: str) -> tuple[str, ...]:
        node_kind(node)
        return tuple(sorted(str(p) for p in self._graph.predecessors(node)))

    def children(self, node: str) -> tuple[str, ...]:
        node_kind(node)
        return tuple(sorted(str(c) for c in self._graph.successors(node)))

    def add_edge(self, parent: str, child: str, reason: str) -> CausalDag:
        """A new graph with one more edge.

        Raises
        ------
        CycleError
            The edge is not X -> V or V -> Y.
        InvalidInput
            A node name is unknown, the reason is empty, or the edge is already registered.
        """
        triples = [(u, v, self.reason((u, v))) for u, v in self.edges]
        return CausalDag.from_edges([*triples, (parent, child, reason)])

    # --- queries ------------------------------------------------------------------------------
    def backward(
        self, outcome: Outcome | str, confidence: Confidence | None = None
    ) -> tuple[BackwardPath, ...]:
        """:meth:`DagView.backward` on this graph with ``confidence`` per edge (default 0.5)."""
        return self.view(confidence).backward(outcome)

    def decisions_for(
        self, outcome: Outcome | str, confidence: Confidence | None = None
    ) -> tuple[tuple[Decision, float], ...]:
        """Decisions that reach ``outcome``, each with its best path's confidence."""
        target = outcome if isinstance(outcome, Outcome) else node_value(str(outcome))
        if not isinstance(target, Outcome):
            raise InvalidInput(f"outcome: must be a Y node or Outcome, got {outcome!r}")
        return self.view(confidence).decisions_for((target,))

    def view(
        self, confidence: Confidence | None = None, uncertainty: Confidence | None = None
    ) -> DagView:
        """A frozen, JSON-able view, optionally annotated with per-edge beliefs."""
        return DagView(
            decisions=self.nodes(NodeKind.X),
            mediators=self.nodes(NodeKind.V),
            outcomes=self.nodes(NodeKind.Y),
            edges=tuple(
                EdgeView(
                    source=u,
                    target=v,
                    reason=self.reason((u, v)),
                    confidence=None if confidence is None else float(confidence((u, v))),
                    uncertainty=None if uncertainty is None else float(uncertainty((u, v))),
                )
                for u, v in self.edges
            ),
        )


@functools.cache
def default_dag() -> CausalDag:
    """The curated registered edge set of :mod:`koi.dag._registry` (built once, cached)."""
    return CausalDag.from_edges(REGISTERED_EDGES)
