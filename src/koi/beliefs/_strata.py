"""Strata: the coarse context a belief is local to (DESIGN §4.2)."""

from __future__ import annotations

import attrs

from koi.errors import InvalidInput
from koi.types import Chain, ModelSpec
from koi.types.validators import identifier

__all__ = ["EdgeKey", "Stratum", "stratum_of"]

EdgeKey = tuple[str, str]
"""A causal edge as ``(parent node, child node)``, e.g. ``("x:tp", "v:comm_share")``."""


@attrs.frozen(order=True, cache_hash=True)  # a dict key in every learning step
class Stratum:
    """GPU type × model class × engine.

    The graph is global but beliefs are local: "TP=8 on PCIe L40S" and "TP=8 on NVLink H100"
    must not share one number.  ``model_class`` is :attr:`koi.types.ModelSpec.size_class`
    (``dense-s`` … ``moe-xl``).
    """

    gpu: str = attrs.field(validator=identifier)
    model_class: str = attrs.field(validator=identifier)
    engine: str = attrs.field(validator=identifier)

    @property
    def key(self) -> str:
        """``gpu|model_class|engine``: a stable text key (JSON object keys, logs)."""
        return f"{self.gpu}|{self.model_class}|{self.engine}"

    @classmethod
    def from_key(cls, key: str) -> Stratum:
        parts = key.split("|")
        if len(parts) != 3:
            raise InvalidInput(f"stratum: expected 'gpu|model_class|engine', got {key!r}")
        return cls(*parts)


def stratum_of(chain: Chain, model: ModelSpec) -> Stratum:
    """The stratum a chain runs in: its GPU type, its model's size class and its engine."""
    if model.name != chain.model:
        raise InvalidInput(f"model: chain runs {chain.model!r}, got spec for {model.name!r}")
    return Stratum(chain.environment.gpu, model.size_class, chain.config.engine)
