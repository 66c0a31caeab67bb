"""Node vocabulary of the causal graph: X decisions, V mediators, Y outcomes."""

from __future__ import annotations

import enum

from koi.errors import InvalidInput
from koi.types import Mediator, Outcome

__all__ = ["Decision", "NodeKind", "node_kind", "node_name", "node_value"]


class Decision(enum.StrEnum):
    """Planner-controlled decisions X (DESIGN §4.1)."""

    GPU_TYPE = "gpu_type"
    INTERCONNECT = "interconnect"
    TP = "tp"
    PP = "pp"
    QUANT = "quant"
    ENGINE = "engine"
    MAX_BATCH_SIZE = "max_batch_size"
    MAX_BATCHED_TOKENS = "max_batched_tokens"
    REPLICAS = "replicas"
    ROUTING = "routing"
    MARKET = "market"


class NodeKind(enum.StrEnum):
    """The three layers of the graph; the value is the node-name prefix."""

    X = "x"
    V = "v"
    Y = "y"


_VOCAB: dict[NodeKind, type[enum.StrEnum]] = {
    NodeKind.X: Decision,
    NodeKind.V: Mediator,
    NodeKind.Y: Outcome,
}


def node_name(value: Decision | Mediator | Outcome) -> str:
    """``"x:tp"``, ``"v:comm_share"``, ``"y:p99_ttft_ms"``."""
    if isinstance(value, Decision):
        return f"x:{value.value}"
    if isinstance(value, Mediator):
        return f"v:{value.value}"
    if isinstance(value, Outcome):
        return f"y:{value.value}"
    raise InvalidInput(f"node: must be a Decision, Mediator or Outcome, got {value!r}")


def node_kind(name: str) -> NodeKind:
    """The kind of a node name; unknown names raise :class:`InvalidInput`."""
    node_value(name)
    return NodeKind(name[0])


def node_value(name: str) -> Decision | Mediator | Outcome:
    """Parse a node name back into its enum member."""
    prefix, sep, rest = name.partition(":") if isinstance(name, str) else ("", "", "")
    if not sep or prefix not in NodeKind.__members__.values():
        msg = f"node: must look like 'x:<decision>', 'v:<mediator>' or 'y:<outcome>', got {name!r}"
        raise InvalidInput(msg)
    kind = NodeKind(prefix)
    try:
        member: Decision | Mediator | Outcome = _VOCAB[kind](rest)  # type: ignore[assignment]
    except ValueError:
        choices = ", ".join(m.value for m in _VOCAB[kind])
        raise InvalidInput(f"node: unknown {kind.name} node {name!r}; known: {choices}") from None
    return member
