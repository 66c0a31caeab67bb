"""Budget books (paper §2.6): an LP relaxation of the fleet allocation, built once in cvxpy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from koi.errors import InvalidInput, SolverError
from koi.selector._highs import quiet_stdout
from koi.selector._model import PoolCapacity

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

    extra_pools: int = 2
    headroom: float = 0.25
    min_share: float = 1e-3


@attrs.frozen
class BudgetBook:
    """A soft bound on where job ``job_id``'s candidates should come from."""

    job_id: str
    pools: tuple[str, ...]
    gpu_types: tuple[str, ...]
    max_gpus: int


class BudgetBooks:
    r"""Root-planner LP, modelled once with cvxpy Parameters (DPP) and re-solved each tick.

    .. math::

        \max_{0 \le s \le M}\ \sum_{j,p} v_{jp}\,n_{jp}\,s_{jp}
        \quad\text{s.t.}\quad \sum_p s_{jp} \le 1,\quad \sum_j n_{jp} s_{jp} \le C_p

    ``s_{jp}`` is the share of job ``j`` served from pool ``p``, ``n`` the GPUs needed, ``v`` the
    value per GPU, ``M`` the 0/1 usability mask. The model is padded to a capacity (doubled when a
    tick has more jobs or pools), so most ticks only change parameter values.
    """

    def __init__(self, cfg: BudgetConfig | None = None) -> None:
        self._cfg = cfg or BudgetConfig()
        self._shape = (0, 0)
        self._prob: Any = None
        self._params: dict[str, Any] = {}
        self._share: Any = None
        self.builds = 0
        self.solves = 0

    def _build(self, n_jobs: int, n_pools: int) -> None:
        import cvxpy as cp

        shape = (n_jobs, n_pools)
        s = cp.Variable(shape, nonneg=True)
        w = cp.Parameter(shape, nonneg=True)
        n = cp.Parameter(shape, nonneg=True)
        mask = cp.Parameter(shape, nonneg=True)
        cap = cp.Parameter(n_pools, nonneg=True)
        total: Any = getattr(cp, "sum")  # noqa: B009  cvxpy's stubs omit the atoms
        times: Any = getattr(cp, "multiply")  # noqa: B009
        cons = [s <= mask, total(s, axis=1) <= 1, total(times(n, s), axis=0) <= cap]
        self._prob = cp.Problem(cp.Maximize(total(times(w, s))), cons)
        self._params = {"w": w, "n": n, "mask": mask, "cap": cap}
        self._share = s
        self._shape = shape
        self.builds += 1

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
        rows, cols = self._shape
        if len(demands) > rows or len(pool_ids) > cols:
            self._build(max(len(demands), 2 * rows, 8), max(len(pool_ids), 2 * cols, 8))
        rows, cols = self._shape
        need = np.zeros((rows, cols))
        w = np.zeros((rows, cols))
        mask = np.zeros((rows, cols))
        cap = np.zeros(cols)
        for j, d in enumerate(demands):
            for p, g in d.gpus_needed.items():
                need[j, col[p]] = g
                w[j, col[p]] = g * d.value_per_gpu.get(p, 0.0)
                mask[j, col[p]] = 1.0
        for c in capacities:
            cap[col[c.pool_id]] = c.capacity_gpus
        self._params["n"].value = need
        self._params["w"].value = w
        self._params["mask"].value = mask
        self._params["cap"].value = cap
        try:
            with quiet_stdout():
                self._prob.solve(solver="HIGHS", verbose=False, output_flag=False)
        except Exception as exc:
            raise SolverError(f"budget books: LP failed ({type(exc).__name__}: {exc})") from None
        if self._prob.status not in ("optimal", "optimal_inaccurate"):
            raise SolverError(f"budget books: LP status {self._prob.status}")
        self.solves += 1
        share = np.asarray(self._share.value)
        gpu_type = {c.pool_id: c.gpu_type for c in capacities}
        return {
            d.job_id: self._book(d, share[j], pool_ids, gpu_type) for j, d in enumerate(demands)
        }

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
