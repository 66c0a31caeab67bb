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
    "KoiConfig",
    "KoiError",
    "KoiWarning",
    "Planner",
    "PluginError",
    "SolverError",
    "SolverLimitError",
    "StateError",
    "__version__",
    "errors",
    "hookimpl",
    "types",
]


def __getattr__(name: str) -> Any:
    # Lazy names: importing koi must not import pluggy, the solvers or the planner.
    if name == "hookimpl":
        from koi.plugins import hookimpl

        return hookimpl
    if name == "KoiConfig":
        from koi.config import KoiConfig

        return KoiConfig
    if name == "Planner":
        from koi.planner import Planner

        return Planner
    if name == "__version__":
        from importlib.metadata import version

        return version("koi")
    raise AttributeError(f"module 'koi' has no attribute {name!r}")
