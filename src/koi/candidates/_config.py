"""The default candidate generator's search space, sizing and focus knobs."""

from __future__ import annotations

import attrs

from koi.types.validators import fraction

__all__ = ["ProposerConfig"]


@attrs.frozen
class ProposerConfig:
    """Search space, sizing and focus of the built-in candidate generator.

    ``tp_options`` × ``pp_options`` × quantizations × ``batch_options`` is the enumeration.  A
    replica is sized to run at ``utilization_target`` of its screened capacity (online) or to
    finish a batch job within ``batch_deadline_margin`` of the time to its deadline; at most
    ``max_replicas`` per chain.  Each later S4↔S5 round multiplies the headroom by
    ``retry_headroom``.  ``exploration`` candidates in the most uncertain strata join the short
    list; ``memo_size`` bounds the sizing memo.

    ``cache_fit_share``: on an engine that admits a prompt once its first slice fits (vLLM with
    chunked prefill), an online job whose prompts may take more than one slice is also screened
    with its batch capped at this share of the requests the KV cache holds whole (when that is
    below every ``batch_options``); 0 screens no cap.  Above that many requests long prompts
    evict each other and an open-loop replica falls into a recompute collapse
    (docs/surrogate.md); the share leaves room for requests longer than the mean and for an
    optimistic memory estimate.

    ``focus_moves`` single-decision moves from the incumbent are proposed, most confident
    backward route first; a route weaker than ``focus_min_confidence`` does not count.  An
    outcome within ``risk_margin`` of its bound is at risk.  Mechanisms whose belief reached
    ``mechanism_min_confidence`` demote the ladders in their scope; up to ``mechanism_tests``
    untested ones get an in-scope ladder.
    """

    tp_options: tuple[int, ...] = (1, 2, 4, 8)
    pp_options: tuple[int, ...] = (1, 2)
    batch_options: tuple[int, ...] = (64, 256)
    cache_fit_share: float = attrs.field(default=0.8, validator=fraction)
    utilization_target: float = 0.7
    batch_deadline_margin: float = 0.8
    max_replicas: int = 64
    exploration: int = 2
    retry_headroom: float = 0.75
    memo_size: int = 4096
    focus_moves: int = 3
    focus_min_confidence: float = 0.05
    risk_margin: float = 0.15
    mechanism_min_confidence: float = 0.6
    mechanism_tests: int = 1
