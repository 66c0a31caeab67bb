"""How uncertain the evidence is about a chain's stratum: what exploration steers by."""

from __future__ import annotations

from collections.abc import Mapping

from koi.beliefs import EvidenceStore, Stratum, stratum_of
from koi.dag import Decision, exercised_decisions, exercised_keys
from koi.types import Chain, ModelSpec, Rank

__all__ = ["StratumUncertainty"]


class StratumUncertainty:
    """Mean edge uncertainty ``U`` of a chain's stratum (1 where nothing was learned).

    ``U`` depends on the stratum and the decisions the chain sets, not on the pool or model:
    keyed so, the thousands of chains a tick screens share a few dozen entries.  The memo
    starts over whenever it is asked about another evidence store.
    """

    def __init__(self) -> None:
        self._evidence: EvidenceStore | None = None
        self._memo: dict[tuple[Stratum, frozenset[Decision]], float] = {}

    def __call__(
        self, chain: Chain, evidence: EvidenceStore, models: Mapping[str, ModelSpec]
    ) -> float:
        if evidence is not self._evidence:
            self._memo.clear()
            self._evidence = evidence
        spec = models.get(chain.model)
        if spec is None:
            return 1.0
        key = (stratum_of(chain, spec), exercised_decisions(chain, 1))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        keys = exercised_keys(Rank(chain, 1), models)
        u = sum(evidence.uncertainty(e, s) for e, s in keys) / len(keys) if keys else 1.0
        self._memo[key] = u
        return u
