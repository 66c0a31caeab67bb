"""The benchmark of paper §3: planners × seeds on a scenario, sweeps, the table and the report.

>>> from koi.bench import run_bench, format_table          # doctest: +SKIP
>>> result = run_bench("smoke", ["koi", "fcfs", "milp-truth"], seeds=1, jobs=1)
>>> print(format_table(result.summary))

Runs execute in a local process pool or, with ``executor=parse_executor("dask")`` and the
``koi[dask]`` extra, on a Dask cluster.
"""

from __future__ import annotations

from koi.bench._claims import CLAIM_METRICS, Claim, claims, format_claims
from koi.bench._executor import ExecutorSpec, InlineExecutor, open_executor, parse_executor
from koi.bench._report import mean_series, plots_available, write_report
from koi.bench._runner import (
    DEVELOPMENT_SEEDS,
    EVERY_REQUEST,
    HELD_OUT_SEED_START,
    METRICS,
    BenchResult,
    RunTask,
    aggregate,
    check_planners,
    execute,
    replay_requests_of,
    run_bench,
    run_one,
    run_tasks,
    world_config,
)
from koi.bench._sweep import Sweep, SweepResult, load_sweep, parse_sweep, run_sweep, sweep_line
from koi.bench._table import COLUMNS, format_table

__all__ = [
    "CLAIM_METRICS",
    "COLUMNS",
    "DEVELOPMENT_SEEDS",
    "EVERY_REQUEST",
    "HELD_OUT_SEED_START",
    "METRICS",
    "BenchResult",
    "Claim",
    "ExecutorSpec",
    "InlineExecutor",
    "RunTask",
    "Sweep",
    "SweepResult",
    "aggregate",
    "check_planners",
    "claims",
    "execute",
    "format_claims",
    "format_table",
    "load_sweep",
    "mean_series",
    "open_executor",
    "parse_executor",
    "parse_sweep",
    "plots_available",
    "replay_requests_of",
    "run_bench",
    "run_one",
    "run_sweep",
    "run_tasks",
    "sweep_line",
    "world_config",
    "write_report",
]
