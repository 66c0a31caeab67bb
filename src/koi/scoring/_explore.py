"""Exploration value ``Expl(P)`` (paper §2.4), counted once per plan."""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping

from koi.errors import InvalidInput

__all__ = ["exploration_value", "exploration_weights"]


def _sum_once(items: Iterable[Hashable], uncertainty: Mapping[Hashable, float], what: str) -> float:
    total = 0.0
    for item in set(items):
        if item not in uncertainty:
            raise InvalidInput(f"{what}: no uncertainty for {item!r}")
        u = uncertainty[item]
        if not (math.isfinite(u) and 0.0 <= u <= 1.0):
            raise InvalidInput(f"{what}[{item!r}]: uncertainty must be in [0, 1], got {u!r}")
        total += u
    return total


def exploration_value(
    covered: Iterable[Hashable],
    uncertainty: Mapping[Hashable, float],
    mechanisms_covered: Iterable[Hashable] = (),
    mechanism_uncertainty: Mapping[Hashable, float] | None = None,
    omega_m: float = 0.5,
) -> float:
    r"""Exploration value of a whole plan.

    .. math::

        \mathrm{Expl}(P) = \sum_{e} A_e(P)\,U_e + \omega_m \sum_{m} A_m(P)\,U_m

    ``covered`` lists the (edge, stratum) items exercised by every ladder of the plan, with
    repeats; each distinct item counts once (``A_e`` is an indicator). ``U`` must lie in [0, 1].

    Examples
    --------
    >>> exploration_value(["a", "b", "a"], {"a": 1.0, "b": 0.25})
    1.25
    """
    if not (math.isfinite(omega_m) and omega_m >= 0):
        raise InvalidInput(f"omega_m: must be >= 0, got {omega_m!r}")
    edges = _sum_once(covered, uncertainty, "uncertainty")
    mechs = _sum_once(mechanisms_covered, mechanism_uncertainty or {}, "mechanism_uncertainty")
    return edges + omega_m * mechs


def exploration_weights(
    uncertainty: Mapping[Hashable, float],
    *,
    mechanisms: Collection[Hashable] = frozenset(),
    beta: float,
    omega_m: float,
) -> dict[Hashable, float]:
    r"""``β·Expl(P)`` as weights per item, the form the joint selector linearizes it in:
    ``w_e = β U_e`` for an (edge, stratum) item, ``w_m = β ω_m U_m`` for an item in
    ``mechanisms``; items with nothing left to learn carry no weight.  Summed over the distinct
    items a plan covers, the weights are ``β·``:func:`exploration_value` of the plan.  The
    items keep the order of ``uncertainty``."""
    out: dict[Hashable, float] = {}
    for item, u in uncertainty.items():
        w = omega_m * u if item in mechanisms else u
        if w > 0:
            out[item] = beta * w
    return out
