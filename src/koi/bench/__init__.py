"""The benchmark of paper §3: planners × seeds on a scenario, the table and the report.

>>> from koi.bench import run_bench, format_table          # doctest: +SKIP
>>> result = run_bench("smoke", ["koi", "fcfs", "oracle"], seeds=1, jobs=1)
>>> print(format_table(result.summary))
"""

from __future__ import annotations

from koi.bench._report import mean_series, plots_available, write_report
from koi.bench._runner import METRICS, BenchResult, aggregate, run_bench, run_one
from koi.bench._table import COLUMNS, format_table

__all__ = [
    "COLUMNS",
    "METRICS",
    "BenchResult",
    "aggregate",
    "format_table",
    "mean_series",
    "plots_available",
    "run_bench",
    "run_one",
    "write_report",
]
