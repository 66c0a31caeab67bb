"""Model architectures."""

from __future__ import annotations

import attrs

from koi.errors import InvalidInput
from koi.types.validators import identifier, non_negative_int, number_in, positive, positive_int

#: A model of a hundred trillion parameters (far past any served one): beyond is a typo.
MAX_PARAMS_B = 1e5

__all__ = ["ModelSpec"]


@attrs.frozen
class ModelSpec:
    """A transformer architecture, from its public config.

    ``params_b`` is the total parameter count in billions and ``active_params_b`` the count a
    token touches (equal for dense models).  For MoE models ``experts`` > 0 and
    ``expert_intermediate`` is each expert's FFN width.
    """

    name: str = attrs.field(validator=identifier)
    params_b: float = attrs.field(validator=[positive, number_in(0.0, MAX_PARAMS_B)])
    active_params_b: float = attrs.field(validator=[positive, number_in(0.0, MAX_PARAMS_B)])
    layers: int = attrs.field(validator=positive_int)
    hidden: int = attrs.field(validator=positive_int)
    heads: int = attrs.field(validator=positive_int)
    kv_heads: int = attrs.field(validator=positive_int)
    head_dim: int = attrs.field(validator=positive_int)
    intermediate: int = attrs.field(validator=positive_int)
    vocab: int = attrs.field(validator=positive_int)
    max_context: int = attrs.field(validator=positive_int)
    experts: int = attrs.field(default=0, validator=non_negative_int)
    experts_per_token: int = attrs.field(default=0, validator=non_negative_int)
    expert_intermediate: int = attrs.field(default=0, validator=non_negative_int)

    def __attrs_post_init__(self) -> None:
        if self.active_params_b > self.params_b:
            msg = (
                f"active_params_b: must be <= params_b ({self.params_b}), "
                f"got {self.active_params_b}"
            )
            raise InvalidInput(msg)
        if self.heads % self.kv_heads:
            msg = f"kv_heads: must divide heads ({self.heads}), got {self.kv_heads}"
            raise InvalidInput(msg)
        if self.experts and not 0 < self.experts_per_token <= self.experts:
            msg = f"experts_per_token: must be in 1..{self.experts}, got {self.experts_per_token}"
            raise InvalidInput(msg)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token at BF16 (K and V, every layer)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @property
    def size_class(self) -> str:
        """Coarse bucket used to stratify evidence: ``dense-s`` … ``moe-xl``."""
        kind = "moe" if self.is_moe else "dense"
        b = self.params_b
        size = "s" if b < 10 else "m" if b < 40 else "l" if b < 150 else "xl"
        return f"{kind}-{size}"
