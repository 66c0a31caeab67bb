"""Where a sized configuration goes: free GPUs per pool, which pools can host a chain, and the
one placement rule every planner shares (one pool with room, else a split)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from koi.types import Chain, ClusterSnapshot, Config, Environment, Ladder, Rank

__all__ = ["PREEMPTION_PRICE_WEIGHT", "fits_shape", "free_gpus", "hosts", "place", "risk_price"]

#: A spot pool's price per GPU-hour is weighed up by ``1 + PREEMPTION_PRICE_WEIGHT × hazard``
#: when ranking pools: one expected preemption per hour costs as much as running four more
#: hours, roughly what a replica's restart, reload and lost requests cost an online job.
PREEMPTION_PRICE_WEIGHT = 4.0


def free_gpus(snapshot: ClusterSnapshot, *, except_job: str | None = None) -> dict[str, int]:
    """GPUs per pool not held by the current ladders of active jobs (but ``except_job``'s).

    Negative where the pool shrank under what runs on it.
    """
    free = {p.id: p.capacity_gpus for p in snapshot.pools}
    for a in snapshot.active:
        if a.job_id == except_job:
            continue
        for pool_id, gpus in a.ladder.gpus_by_pool().items():
            free[pool_id] = free.get(pool_id, 0) - gpus
    return free


def fits_shape(env: Environment, gpus_per_chain: int) -> bool:
    """A chain of ``gpus_per_chain`` GPUs packs onto this instance type (or spans nodes)."""
    per = env.gpus_per_instance
    if gpus_per_chain <= per:
        return per % gpus_per_chain == 0
    return env.multi_node and gpus_per_chain % per == 0


def risk_price(env: Environment) -> float:
    """Price per GPU-hour weighed up by the pool's preemption hazard."""
    return env.price_usd_per_gpu_h * (1 + PREEMPTION_PRICE_WEIGHT * env.preemption_per_h)


def hosts(envs: Iterable[Environment], gpu: str, gpus_per_chain: int) -> list[Environment]:
    """The pools that can host a chain of ``gpus_per_chain`` ``gpu`` GPUs, cheapest first by
    :func:`risk_price`, ties by pool id."""
    return sorted(
        (e for e in envs if e.gpu == gpu and fits_shape(e, gpus_per_chain)),
        key=lambda e: (risk_price(e), e.id),
    )


def place(
    model: str,
    config: Config,
    replicas: int,
    pools: Sequence[Environment],
    free: Mapping[str, int],
    *,
    partial: bool = False,
) -> Ladder | None:
    """``replicas`` chains of ``config`` on the first of ``pools`` with room for all of them,
    else split over ``pools`` in order; ``None`` when they do not all fit (with ``partial``:
    as many as fit, ``None`` only when none does).

    ``free`` counts GPUs per pool (:func:`free_gpus`); ``pools`` come in preference order
    (:func:`hosts` for cheapest first).
    """
    room = {e.id: max(free.get(e.id, 0), 0) // config.gpus for e in pools}
    for env in pools:
        if room[env.id] >= replicas:
            return Ladder((Rank(Chain(model, env, config), replicas),))
    ranks: list[Rank] = []
    left = replicas
    for env in pools:
        take = min(room[env.id], left)
        if take > 0:
            ranks.append(Rank(Chain(model, env, config), take))
            left -= take
        if left == 0:
            break
    if ranks and (left == 0 or partial):
        return Ladder(tuple(ranks))
    return None
