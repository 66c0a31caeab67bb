"""The default candidate generator's search space, sizing and focus knobs."""

from __future__ import annotations

import attrs

from koi.types.validators import (
    boolean,
    engine_names,
    fraction,
    list_to_tuple,
    non_negative,
    non_negative_int,
    number_in,
    positive_int,
    positive_ints,
    share,
)

__all__ = ["ProposerConfig"]


@attrs.frozen
class ProposerConfig:
    """Search space, sizing and focus of the built-in candidate generator.

    ``engine_options`` × ``tp_options`` × ``pp_options`` × quantizations × ``batch_options`` is
    the enumeration; with more than one engine the engine is also a focus decision, and an
    option on an engine other than the first is kept only where its screened capacity is at
    least ``engine_min_gain`` times the first engine's for the same config (0, the default,
    keeps them all; a change of engine is a cold start on a stratum with no evidence of its
    own, so 1.15 keeps only a real gain).  The engine is chosen when a job is placed: a running
    job's candidates keep its engine (when listed; one the screen does not list, a host's own
    deployment, gets the listed ones) unless ``engine_changes`` (a change of engine restarts
    every replica on strata with no evidence of their own, and measured it cost more than it
    gained; docs/benchmark.md).  A
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

    engine_options: tuple[str, ...] = attrs.field(
        default=("vllm",), converter=list_to_tuple, validator=engine_names
    )
    engine_min_gain: float = attrs.field(default=0.0, validator=number_in(0.0, 100.0))
    engine_changes: bool = attrs.field(default=False, validator=boolean)
    tp_options: tuple[int, ...] = attrs.field(
        default=(1, 2, 4, 8), converter=list_to_tuple, validator=positive_ints
    )
    pp_options: tuple[int, ...] = attrs.field(
        default=(1, 2), converter=list_to_tuple, validator=positive_ints
    )
    batch_options: tuple[int, ...] = attrs.field(
        default=(64, 256), converter=list_to_tuple, validator=positive_ints
    )
    cache_fit_share: float = attrs.field(default=0.8, validator=fraction)
    utilization_target: float = attrs.field(default=0.7, validator=share)
    batch_deadline_margin: float = attrs.field(default=0.8, validator=share)
    max_replicas: int = attrs.field(default=64, validator=positive_int)
    exploration: int = attrs.field(default=2, validator=non_negative_int)
    retry_headroom: float = attrs.field(default=0.75, validator=share)
    memo_size: int = attrs.field(default=4096, validator=positive_int)
    focus_moves: int = attrs.field(default=3, validator=non_negative_int)
    focus_min_confidence: float = attrs.field(default=0.05, validator=fraction)
    risk_margin: float = attrs.field(default=0.15, validator=non_negative)
    mechanism_min_confidence: float = attrs.field(default=0.6, validator=fraction)
    mechanism_tests: int = attrs.field(default=1, validator=non_negative_int)
