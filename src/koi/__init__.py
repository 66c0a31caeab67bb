"""koi: plan LLM inference fleets with a causal, self-calibrating, MILP-backed planner.

``import koi`` only defines names: no entry-point scan, no solver import, no environment read.
"""

from __future__ import annotations

from typing import Any

from koi import errors, types
from koi.errors import (
    InfeasibleError,
    InvalidInput,
    KoiError,
    KoiWarning,
    PluginError,
    SolverError,
    SolverLimitError,
    StateError,
)

__all__ = [
    "InfeasibleError",
    "InvalidInput",
    "KoiError",
    "KoiWarning",
    "PluginError",
    "SolverError",
    "SolverLimitError",
    "StateError",
    "__version__",
    "errors",
    "types",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("koi")
    raise AttributeError(f"module 'koi' has no attribute {name!r}")
