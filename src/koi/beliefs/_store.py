"""The evidence store: one Beta belief per (edge, stratum), immutable and checkpointable."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from koi.beliefs._beta import Beta
from koi.beliefs._strata import EdgeKey, Stratum
from koi.errors import InvalidInput, KoiError

__all__ = ["EvidenceStore"]

StoreKey = tuple[EdgeKey, Stratum]


def _freeze(value: Mapping[StoreKey, Beta]) -> Mapping[StoreKey, Beta]:
    for key, belief in value.items():
        _check_key(key)
        if not isinstance(belief, Beta):
            raise InvalidInput(f"beliefs[{key!r}]: must be a Beta, got {belief!r}")
    return MappingProxyType(dict(value))


def _check_key(key: object) -> None:
    ok = (
        isinstance(key, tuple)
        and len(key) == 2
        and isinstance(key[0], tuple)
        and len(key[0]) == 2
        and all(isinstance(n, str) for n in key[0])
        and isinstance(key[1], Stratum)
    )
    if not ok:
        raise InvalidInput(f"beliefs: keys must be ((parent, child), Stratum), got {key!r}")


@attrs.frozen
class EvidenceStore:
    """Frozen mapping ``(edge, stratum) -> Beta``; a missing key reads as ``Beta(1, 1)``.

    Every update returns a new store, so a tick can compute the next store and the planner can
    checkpoint it without copying.  ``to_data``/``from_data`` give a JSON-ready round trip.
    """

    _beliefs: Mapping[StoreKey, Beta] = attrs.field(
        factory=dict, converter=_freeze, alias="beliefs", eq=False, hash=False
    )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EvidenceStore):
            return NotImplemented
        return dict(self._beliefs) == dict(other._beliefs)

    def __hash__(self) -> int:
        return hash(frozenset(self._beliefs.items()))

    def __len__(self) -> int:
        return len(self._beliefs)

    def __iter__(self) -> Iterator[StoreKey]:
        return iter(sorted(self._beliefs))

    def __contains__(self, key: object) -> bool:
        return key in self._beliefs

    def get(self, edge: EdgeKey, stratum: Stratum) -> Beta:
        """The belief for ``edge`` in ``stratum`` (``Beta(1, 1)`` when never updated)."""
        return self._beliefs.get(((edge[0], edge[1]), stratum), _UNIFORM)

    def items(self) -> tuple[tuple[StoreKey, Beta], ...]:
        """Stored (non-default) entries in a deterministic order."""
        return tuple((k, self._beliefs[k]) for k in sorted(self._beliefs))

    def strata(self) -> tuple[Stratum, ...]:
        """Strata with at least one stored belief."""
        return tuple(sorted({s for _, s in self._beliefs}))

    def confidence(self, edge: EdgeKey, stratum: Stratum) -> float:
        return self.get(edge, stratum).confidence

    def uncertainty(self, edge: EdgeKey, stratum: Stratum) -> float:
        return self.get(edge, stratum).uncertainty

    def confidence_fn(self, stratum: Stratum) -> Callable[[EdgeKey], float]:
        """A confidence lookup bound to one stratum (what ``CausalDag.backward`` takes)."""
        return lambda edge: self.get(edge, stratum).confidence

    def uncertainty_fn(self, stratum: Stratum) -> Callable[[EdgeKey], float]:
        """An uncertainty lookup bound to one stratum (for views and exploration)."""
        return lambda edge: self.get(edge, stratum).uncertainty

    def mean_uncertainty(self, keys: Iterable[StoreKey] | None = None) -> float:
        """Mean ``U`` over ``keys`` (unvisited keys count as 1), or over stored entries.

        Over stored entries an empty store reads 1.0: nothing is known yet.
        """
        chosen = list(self._beliefs) if keys is None else list(keys)
        if not chosen:
            return 1.0
        return math.fsum(self.get(e, s).uncertainty for e, s in chosen) / len(chosen)

    def with_belief(self, edge: EdgeKey, stratum: Stratum, belief: Beta) -> EvidenceStore:
        """A store with one belief replaced."""
        beliefs = dict(self._beliefs)
        key: StoreKey = ((edge[0], edge[1]), stratum)
        _check_key(key)
        beliefs[key] = belief
        return EvidenceStore(beliefs)

    def apply(
        self,
        edges: Iterable[EdgeKey],
        stratum: Stratum,
        *,
        support: float = 0.0,
        contradict: float = 0.0,
    ) -> EvidenceStore:
        """Add the same ``support``/``contradict`` amounts to every edge in ``stratum``."""
        return self.apply_many(((edge, stratum), (support, contradict)) for edge in edges)

    def apply_many(self, updates: Iterable[tuple[StoreKey, tuple[float, float]]]) -> EvidenceStore:
        """Apply ``((edge, stratum), (support, contradict))`` updates; amounts add up."""
        beliefs = dict(self._beliefs)
        for (edge, stratum), (support, contradict) in updates:
            key: StoreKey = ((edge[0], edge[1]), stratum)
            _check_key(key)
            beliefs[key] = beliefs.get(key, _UNIFORM).updated(support, contradict)
        return EvidenceStore(beliefs)

    def to_data(self) -> list[dict[str, Any]]:
        """JSON-ready list of stored entries (sorted, so the text is stable)."""
        return [
            {
                "edge": [edge[0], edge[1]],
                "stratum": {"gpu": s.gpu, "model_class": s.model_class, "engine": s.engine},
                "alpha": b.alpha,
                "beta": b.beta,
            }
            for (edge, s), b in self.items()
        ]

    @classmethod
    def from_data(cls, data: Any, *, where: str = "evidence") -> EvidenceStore:
        """Rebuild a store from :meth:`to_data` output; bad entries raise ``InvalidInput``."""
        if not isinstance(data, list):
            raise InvalidInput(f"{where}: expected a list, got {type(data).__name__}")
        beliefs: dict[StoreKey, Beta] = {}
        for i, item in enumerate(data):
            at = f"{where}[{i}]"
            try:
                edge = item["edge"]
                if not (isinstance(edge, list) and len(edge) == 2):
                    raise InvalidInput(f"edge: expected [parent, child], got {edge!r}")
                st = item["stratum"]
                stratum = Stratum(st["gpu"], st["model_class"], st["engine"])
                key: StoreKey = ((str(edge[0]), str(edge[1])), stratum)
                if key in beliefs:
                    raise InvalidInput(f"duplicate entry for {key!r}")
                beliefs[key] = Beta(item["alpha"], item["beta"])
            except KeyError as exc:
                raise InvalidInput(f"{at}: required field {exc} missing") from None
            except (TypeError, KoiError) as exc:
                raise InvalidInput(f"{at}: {exc}") from None
        return cls(beliefs)


_UNIFORM = Beta.uniform()
