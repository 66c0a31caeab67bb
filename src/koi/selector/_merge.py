"""Identical jobs: jobs the MILP cannot tell apart, merged into one class with a count per option.

Tenants on a shared service tier run copies of one service: the same candidates with the same
values, uses, swap flags, exploration items and priority-rule role.  As separate jobs they give
the MILP ``m`` interchangeable binary blocks (``m!`` equal plans for branch and bound to wade
through); as one class they give one integer count per candidate, ``Σ_k n_k = m``.  The
decoded plan hands the class's choices to its members in job order, so it is deterministic.
"""

from __future__ import annotations

from collections.abc import Hashable

from koi.selector._compile import Compiled

__all__ = ["job_classes"]


def _signature(comp: Compiled, i: int) -> Hashable:
    """Everything the MILP reads about job ``i``, except its name."""
    return (
        int(comp.job_priority[i]),
        int(comp.group_of_job[i]),
        tuple(
            (
                float(comp.value[k]),
                comp.use_pools[k].tobytes(),
                comp.use_amount[k].tobytes(),
                float(comp.gpus[k]),
                bool(comp.changes[k]),
                bool(comp.is_defer[k]),
                comp.cover_items[k],
                comp.blocked_pools[k],
                bool(comp.best_effort[k]),
                comp.free_pools[k].tobytes(),
                comp.free_amount[k].tobytes(),
            )
            for k in comp.job_slice(i)
        ),
    )


def job_classes(comp: Compiled) -> tuple[tuple[int, ...], ...]:
    """Jobs grouped by identical signature, each class in job order, classes by first member.

    Jobs that reserve pools under the priority rule are merged only with jobs that reserve the
    same pools at the same level (their signatures then match: the reservation follows from the
    candidates, the priority and the quota group).
    """
    by_sig: dict[Hashable, list[int]] = {}
    for i in range(comp.n_jobs):
        by_sig.setdefault(_signature(comp, i), []).append(i)
    return tuple(tuple(members) for members in by_sig.values())
