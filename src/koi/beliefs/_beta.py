"""Beta beliefs and the normalised posterior uncertainty ``U`` (paper §2.3)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from koi.errors import InvalidInput

__all__ = ["Beta", "uncertainty"]


def _positive_finite(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (isinstance(value, float) and math.isfinite(value) and value > 0):
        raise InvalidInput(f"{attribute.name}: must be a finite number > 0, got {value!r}")


def _to_float(value: Any) -> Any:
    # Keep non-numbers as they are so the validator names them.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def uncertainty(alpha: float, beta: float) -> float:
    r"""Normalised posterior uncertainty of ``Beta(alpha, beta)``.

    .. math:: U(\alpha, \beta) = \frac{12\alpha\beta}{(\alpha+\beta)^2(\alpha+\beta+1)}

    This is twelve times the Beta variance, so the uniform prior ``Beta(1, 1)`` has ``U = 1``
    and ``U`` falls as ``1/(n+1)`` when ``n = alpha + beta`` grows at a fixed mean.

    Examples
    --------
    >>> uncertainty(1.0, 1.0)
    1.0
    """
    if not (alpha > 0 and beta > 0 and math.isfinite(alpha) and math.isfinite(beta)):
        raise InvalidInput(
            f"uncertainty: alpha and beta must be finite and > 0, got {alpha}, {beta}"
        )
    n = alpha + beta
    return 12.0 * alpha * beta / (n * n * (n + 1.0))


@attrs.frozen
class Beta:
    """A ``Beta(alpha, beta)`` belief: ``alpha`` counts support, ``beta`` contradiction.

    Starts at the uniform ``Beta(1, 1)``; every update only adds evidence, so updates commute.
    """

    alpha: float = attrs.field(default=1.0, converter=_to_float, validator=_positive_finite)
    beta: float = attrs.field(default=1.0, converter=_to_float, validator=_positive_finite)

    @classmethod
    def uniform(cls) -> Beta:
        """The uninformative prior every new edge, stratum and mechanism starts from."""
        return cls(1.0, 1.0)

    @property
    def confidence(self) -> float:
        r"""Posterior mean :math:`c = \alpha / (\alpha + \beta)`."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def uncertainty(self) -> float:
        """:func:`uncertainty` of this belief (1 for ``Beta(1, 1)``)."""
        return uncertainty(self.alpha, self.beta)

    @property
    def evidence(self) -> float:
        """Evidence accumulated beyond the uniform prior."""
        return self.alpha + self.beta - 2.0

    def updated(self, support: float = 0.0, contradict: float = 0.0) -> Beta:
        """Add ``support`` to ``alpha`` and ``contradict`` to ``beta`` (both ``>= 0``)."""
        for name, amount in (("support", support), ("contradict", contradict)):
            if not (math.isfinite(amount) and amount >= 0):
                raise InvalidInput(f"{name}: must be a finite number >= 0, got {amount!r}")
        return Beta(self.alpha + support, self.beta + contradict)
