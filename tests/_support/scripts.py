"""Benchmark scripts loaded as modules, for the tests of their functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a fresh module; its imports of sibling scripts resolve as
    when it runs as a script (``benchmarks/`` on the path)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
