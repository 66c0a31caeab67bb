"""DESIGN §1's layering rule, enforced on the source tree.

A module imports only public names of another package (never ``koi.x._y`` from outside
``koi.x``); the core never imports the plugin layer, the simulator, the baselines, the bench,
the command line or the integrations; importing ``koi`` or ``koi.config`` loads no solver and
no plugin machinery.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
CORE = frozenset(
    {
        "types",
        "catalog",
        "errors",
        "config",
        "dag",
        "beliefs",
        "cusum",
        "risk",
        "surrogate",
        "scoring",
        "selector",
        "calibration",
        "candidates",
    }
)
ABOVE_CORE = frozenset(
    {"plugins", "planner", "sim", "baselines", "bench", "cli", "integrations", "agent", "testing"}
)


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((SRC / "koi").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(p for p in parts if p != "__init__"), path


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def _package(module: str) -> str:
    """``koi.planner._learn`` -> ``planner``; ``koi.config`` -> ``config``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


MODULES = list(_modules())


def test_the_tree_is_found() -> None:
    assert len(MODULES) > 100
    assert {_package(m) for m, _ in MODULES} >= CORE - {"errors", "config"}


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_no_private_module_of_another_package(module: str, path: Path) -> None:
    own = _package(module)
    bad = sorted(
        name
        for name in _imports(path)
        if name.startswith("koi.")
        and _package(name) != own
        and any(p.startswith("_") and p != "__init__" for p in name.split(".")[2:])
    )
    assert not bad, f"{module} imports private modules of other packages: {bad}"


@pytest.mark.parametrize(
    ("module", "path"),
    [(m, p) for m, p in MODULES if _package(m) in CORE],
    ids=[m for m, _ in MODULES if _package(m) in CORE],
)
def test_the_core_never_imports_the_layers_above(module: str, path: Path) -> None:
    bad = sorted({n for n in _imports(path) if n.startswith("koi.") and _package(n) in ABOVE_CORE})
    assert not bad, f"{module} (core) imports {bad}"


def _loaded_after(statement: str) -> set[str]:
    code = f"{statement}; import sys; print('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return {m.split(".")[0] for m in out.stdout.split()} | set(out.stdout.split())


def test_importing_koi_loads_no_solver_and_no_plugins() -> None:
    loaded = _loaded_after("import koi")
    assert not loaded & {"highspy", "cvxpy", "pluggy", "koi.plugins", "koi.planner"}


def test_importing_the_config_loads_no_plugin_machinery() -> None:
    loaded = _loaded_after("import koi.config")
    assert "koi.config" in loaded
    assert not loaded & {"pluggy", "koi.plugins", "koi.plugins._llm"}
