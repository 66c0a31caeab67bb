"""Budget books (paper §2.6): an LP relaxation of the fleet allocation, solved by HiGHS."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import scipy.sparse as sp

from koi.errors import InvalidInput, SolverError
from koi.selector._formulate import MilpArrays
from koi.selector._highs import solve_milp
from koi.selector._model import PoolCapacity
from koi.types.validators import fraction, non_negative, non_negative_int

__all__ = ["BudgetBook", "BudgetBooks", "BudgetConfig", "JobDemand"]


def _float_map(value: Any) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(value).items()}


@attrs.frozen
class JobDemand:
    """What one job would need and earn per pool.

    ``gpus_needed[p]``: GPUs of pool ``p`` that serve the whole job (from the surrogate's
    cheapest feasible chain there); ``value_per_gpu[p]``: score gained per such GPU (≥ 0, e.g.
    ``(J(best ladder in p) − J(∅)) / gpus_needed[p]``). Pools absent from ``gpus_needed`` are
    unusable for the job.
    """

    job_id: str
    gpus_needed: Mapping[str, float] = attrs.field(converter=_float_map)
    value_per_gpu: Mapping[str, float] = attrs.field(converter=_float_map)

    def __attrs_post_init__(self) -> None:
        for p, n in self.gpus_needed.items():
            if not (math.isfinite(n) and n > 0):
                raise InvalidInput(f"gpus_needed[{p!r}]: must be > 0, got {n!r}")
        for p, v in self.value_per_gpu.items():
            if not (math.isfinite(v) and v >= 0):
                raise InvalidInput(f"value_per_gpu[{p!r}]: must be >= 0, got {v!r}")
            if p not in self.gpus_needed:
                raise InvalidInput(f"value_per_gpu[{p!r}]: pool missing from gpus_needed")


@attrs.frozen
class BudgetConfig:
    """``extra_pools``: best unallocated pools added to each book (ranked by value per GPU);
    ``headroom``: ``max_gpus`` slack over the GPUs needed in the book's pools; ``min_share``:
    LP share below which an allocation is ignored."""

    extra_pools: int = attrs.field(default=2, validator=non_negative_int)
    headroom: float = attrs.field(default=0.25, validator=non_negative)
    min_share: float = attrs.field(default=1e-3, validator=fraction)


@attrs.frozen
class BudgetBook:
    """A soft bound on where job ``job_id``'s candidates should come from."""

    job_id: str
    pools: tuple[str, ...]
    gpu_types: tuple[str, ...]
    max_gpus: int


class BudgetBooks:
    r"""The root planner's LP, solved each tick over the usable (job, pool) pairs only.

    .. math::

        \max_{0 \le s \le M}\ \sum_{j,p} v_{jp}\,n_{jp}\,s_{jp}
        \quad\text{s.t.}\quad \sum_p s_{jp} \le 1,\quad \sum_j n_{jp} s_{jp} \le C_p

    ``s_{jp}`` is the share of job ``j`` served from pool ``p``, ``n`` the GPUs needed, ``v`` the
    value per GPU, ``M`` the 0/1 usability mask: only the pairs with ``M = 1`` are columns.
    HiGHS (already the selector's MILP solver) solves it directly; a modelling layer cost more
    to import and to canonicalize each tick than the solve itself.
    """

    def __init__(self, cfg: BudgetConfig | None = None) -> None:
        self._cfg = cfg or BudgetConfig()
        self.solves = 0

    def solve(
        self, demands: Sequence[JobDemand], capacities: Sequence[PoolCapacity]
    ) -> dict[str, BudgetBook]:
        """One book per job: pools with an LP share, plus the next best ``extra_pools``."""
        pool_ids = [c.pool_id for c in capacities]
        if len(set(pool_ids)) != len(pool_ids):
            raise InvalidInput("capacities: duplicate pool_id")
        if len({d.job_id for d in demands}) != len(demands):
            raise InvalidInput("demands: duplicate job_id")
        col = {p: i for i, p in enumerate(pool_ids)}
        for d in demands:
            for p in d.gpus_needed:
                if p not in col:
                    raise InvalidInput(f"demands[{d.job_id!r}].gpus_needed: unknown pool {p!r}")
        if not demands:
            return {}
        share = self._shares(demands, capacities, col)
        self.solves += 1
        gpu_type = {c.pool_id: c.gpu_type for c in capacities}
        return {
            d.job_id: self._book(d, share[j], pool_ids, gpu_type) for j, d in enumerate(demands)
        }

    @staticmethod
    def _shares(
        demands: Sequence[JobDemand], capacities: Sequence[PoolCapacity], col: Mapping[str, int]
    ) -> np.ndarray:
        """The LP's optimal shares as a dense (jobs × pools) array."""
        n_jobs, n_pools = len(demands), len(capacities)
        pairs = [
            (j, col[p], g, g * d.value_per_gpu.get(p, 0.0))
            for j, d in enumerate(demands)
            for p, g in d.gpus_needed.items()
        ]
        n = len(pairs)
        share = np.zeros((n_jobs, n_pools))
        if n == 0:
            return share
        job = np.array([q[0] for q in pairs], dtype=np.int64)
        pool = np.array([q[1] for q in pairs], dtype=np.int64)
        need = np.array([q[2] for q in pairs], dtype=float)
        cols = np.arange(n)
        # Rows: one per job (shares sum to at most 1), then one per pool (capacity).
        A = sp.csc_matrix(
            (
                np.concatenate([np.ones(n), need]),
                (np.concatenate([job, n_jobs + pool]), np.concatenate([cols, cols])),
            ),
            shape=(n_jobs + n_pools, n),
        )
        cap = np.zeros(n_pools)
        for c in capacities:
            cap[col[c.pool_id]] = c.capacity_gpus
        lp = MilpArrays(
            c=np.array([q[3] for q in pairs], dtype=float),
            A=A,
            row_lo=np.full(n_jobs + n_pools, -np.inf),
            row_hi=np.concatenate([np.ones(n_jobs), cap]),
            col_lo=np.zeros(n),
            col_hi=np.ones(n),
            integrality=np.zeros(n, dtype=np.int64),
            n_x=n,
            row_names=(),
        )
        res = solve_milp(lp, time_limit_s=math.inf, mip_rel_gap=0.0, relax=True)
        if res.x is None or res.status != "optimal":
            raise SolverError(f"budget books: LP {res.status} ({res.message})")
        share[job, pool] = np.clip(res.x, 0.0, 1.0)
        return share

    def _book(
        self,
        d: JobDemand,
        share: np.ndarray,
        pool_ids: Sequence[str],
        gpu_type: Mapping[str, str],
    ) -> BudgetBook:
        usable = [p for p in pool_ids if p in d.gpus_needed]
        pos = {p: i for i, p in enumerate(pool_ids)}
        chosen = sorted(
            (p for p in usable if share[pos[p]] > self._cfg.min_share),
            key=lambda p: -share[pos[p]],
        )
        rest = sorted(
            (p for p in usable if p not in chosen),
            key=lambda p: (-d.value_per_gpu.get(p, 0.0), d.gpus_needed[p]),
        )
        pools = tuple(chosen + rest[: self._cfg.extra_pools])
        types = tuple(dict.fromkeys(gpu_type[p] for p in pools if gpu_type[p]))
        need = max((d.gpus_needed[p] for p in pools), default=0.0)
        return BudgetBook(d.job_id, pools, types, math.ceil(need * (1 + self._cfg.headroom)))
