"""Inputs and outputs of the joint selector: plain, frozen, solver-free."""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types import ActionKind, ClusterSnapshot
from koi.types.validators import (
    boolean,
    finite,
    non_negative,
    non_negative_int,
    optional,
    positive_int,
)

__all__ = [
    "Candidate",
    "PoolCapacity",
    "Selection",
    "SelectionProblem",
    "SelectionStatus",
    "SelectorConfig",
]


def _int_map(value: Any) -> dict[str, int]:
    return dict(value.items() if hasattr(value, "items") else value)


def _nested_int_map(value: Any) -> dict[str, dict[str, int]]:
    return {str(k): _int_map(v) for k, v in dict(value).items()}


def _opt_int_map(value: Any) -> dict[str, int] | None:
    return None if value is None else _int_map(value)


def _to_action(value: Any) -> ActionKind:
    try:
        return ActionKind(value)
    except ValueError:
        kinds = [a.value for a in ActionKind]
        raise InvalidInput(f"kind: must be one of {kinds}, got {value!r}") from None


@attrs.frozen
class SelectorConfig:
    """Defaults of the joint selector.

    ``time_limit_s`` / ``mip_rel_gap`` are HiGHS' limits (``None``: no wall-clock limit, so
    the plan does not depend on the machine's speed — the benchmark's setting);
    ``make_before_break`` charges a changing candidate the GPUs its job holds now plus its new
    GPUs in the same tick;
    ``prune_dominated`` drops candidates another candidate of the same job beats on every count
    (exact: the optimum does not change); ``lp_fix`` fixes the jobs whose LP relaxation is
    integral and solves the rest as a smaller MILP (at least ``lp_fix_min_candidates`` candidates,
    given ``lp_fix_time_share`` of the remaining time); its plan warm-starts the full MILP.
    ``merge_identical`` solves jobs the MILP cannot tell apart (same candidates, values, uses,
    priority and quota group) as one class with an integer count per candidate (exact: the
    optimum does not change, the symmetric copies of it go).
    """

    time_limit_s: float | None = attrs.field(default=2.0, validator=optional(non_negative))
    mip_rel_gap: float = attrs.field(default=1e-3, validator=non_negative)
    make_before_break: bool = attrs.field(default=True, validator=boolean)
    prune_dominated: bool = attrs.field(default=True, validator=boolean)
    lp_fix: bool = attrs.field(default=True, validator=boolean)
    lp_fix_min_candidates: int = attrs.field(default=2000, validator=non_negative_int)
    lp_fix_time_share: float = attrs.field(default=0.3, validator=non_negative)
    merge_identical: bool = attrs.field(default=True, validator=boolean)


def _frozen_items(items: Iterable[Hashable]) -> frozenset[Hashable]:
    return frozenset(items)


@attrs.frozen
class Candidate:
    """One option for one job.

    ``value`` is ``J − γp − λ·Switch`` in score units. ``gpus_by_pool`` is the steady-state use;
    ``transient_gpus_by_pool`` optionally gives the peak use during a make-before-break switch
    (default: GPUs held now plus ``gpus_by_pool``). ``changes`` marks a candidate that counts
    against the swap budget (C4). ``covers`` lists the exploration items it exercises.
    ``best_effort`` marks a candidate that serves a job past C3's risk bound because nothing
    meets it: such candidates together use only GPUs no job holds now, so a job within its
    target never gives up capacity for one — except what a candidate marked ``frees_room``
    gives up (a donor's scale-in that keeps it within its target, offered to make room):
    those GPUs count as free to best-effort candidates when it is chosen.
    """

    job_id: str
    key: str
    kind: ActionKind = attrs.field(converter=_to_action)
    value: float = attrs.field(validator=finite)
    gpus_by_pool: Mapping[str, int] = attrs.field(factory=dict, converter=_int_map)
    covers: frozenset[Hashable] = attrs.field(default=frozenset(), converter=_frozen_items)
    changes: bool = False
    transient_gpus_by_pool: Mapping[str, int] | None = attrs.field(
        default=None, converter=_opt_int_map
    )
    best_effort: bool = False
    frees_room: bool = False

    @property
    def gpus(self) -> int:
        return sum(self.gpus_by_pool.values())


@attrs.frozen
class PoolCapacity:
    """Capacity of one pool in GPUs (instances × GPUs per instance), counting GPUs held now."""

    pool_id: str
    capacity_gpus: int = attrs.field(validator=non_negative_int)
    gpus_per_instance: int = attrs.field(default=1, validator=positive_int)
    price_usd_per_h: float = attrs.field(default=0.0, validator=non_negative)
    gpu_type: str = ""


def pool_capacities(snapshot: ClusterSnapshot) -> list[PoolCapacity]:
    """The snapshot's pools as the selector's capacities."""
    return [
        PoolCapacity(
            pool_id=p.id,
            capacity_gpus=p.capacity_gpus,
            gpus_per_instance=p.environment.gpus_per_instance,
            price_usd_per_h=p.environment.price_usd_per_h,
            gpu_type=p.environment.gpu,
        )
        for p in snapshot.pools
    ]


# Named converters: mypy's attrs plugin cannot type ``converter=tuple`` / ``converter=dict``.
def _candidates(items: Iterable[Candidate]) -> tuple[Candidate, ...]:
    return tuple(items)


def _pools(items: Iterable[PoolCapacity]) -> tuple[PoolCapacity, ...]:
    return tuple(items)


def _weights(items: Mapping[Hashable, float]) -> dict[Hashable, float]:
    return dict(items)


def _str_map(items: Mapping[str, str]) -> dict[str, str]:
    return dict(items)


@attrs.frozen
class SelectionProblem:
    """One tick's joint-selection instance.

    ``candidates`` (grouped by ``job_id``; every job has at least one, e.g. keep or defer);
    ``exploration_weights`` maps an exploration item to ``β·U`` (already multiplied);
    ``swap_budget`` is ``B_t`` (C4; ``None`` = unlimited); ``priority`` and ``quota_group`` map a
    job to its priority (default 0) and quota group; ``quota_caps`` caps GPUs per group (C5);
    ``held_gpus`` gives, for each active job, the GPUs it holds now per pool.
    """

    candidates: tuple[Candidate, ...] = attrs.field(converter=_candidates)
    pools: tuple[PoolCapacity, ...] = attrs.field(converter=_pools)
    exploration_weights: Mapping[Hashable, float] = attrs.field(factory=dict, converter=_weights)
    swap_budget: int | None = None
    priority: Mapping[str, int] = attrs.field(factory=dict, converter=_int_map)
    quota_group: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)
    quota_caps: Mapping[str, int] = attrs.field(factory=dict, converter=_int_map)
    held_gpus: Mapping[str, Mapping[str, int]] = attrs.field(
        factory=dict, converter=_nested_int_map
    )


class SelectionStatus(enum.StrEnum):
    """How the selection was obtained."""

    OPTIMAL = "optimal"  # HiGHS proved the incumbent within the requested relative gap
    FEASIBLE_GAP = "feasible_gap"  # a limit stopped HiGHS with an incumbent; see ``gap``
    GREEDY_FALLBACK = "greedy_fallback"  # the greedy plan (solver failed or was not asked)


@attrs.frozen
class Selection:
    """The chosen candidate per job and how good it is provably.

    ``objective`` is ``Σ value + Σ_e w_e·[e covered]`` of the chosen plan; ``bound`` an upper
    bound on the optimum (``inf`` when unknown) and ``gap = (bound − objective) / max(|objective|,
    1)``. ``binding`` names the constraints that are tight at the chosen plan (``capacity[pool]``,
    ``swap_budget``, ``quota[group]``, ``priority[pool]``, ``free[pool]``). ``pruned`` counts the
    dominated candidates dropped before solving.
    """

    status: SelectionStatus
    chosen: Mapping[str, str] = attrs.field(converter=_str_map)
    objective: float
    bound: float
    gap: float
    solve_time_s: float
    binding: tuple[str, ...]
    greedy_objective: float
    pruned: int = 0
    message: str = ""
