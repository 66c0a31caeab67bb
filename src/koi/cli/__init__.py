"""The ``koi`` command line.

Each sub-command lives in its own private module exposing ``register(subparsers)``; the
module's handler receives the parsed namespace and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from koi.errors import KoiError

__all__ = ["main"]

# Sub-command modules, in the order ``koi --help`` lists them.
_COMMANDS: tuple[str, ...] = (
    "koi.cli._agent",
    "koi.cli._bench",
    "koi.cli._catalog",
    "koi.cli._predict",
    "koi.cli._plan",
    "koi.cli._scenarios",
    "koi.cli._sweep",
)


def _version() -> str:
    from importlib.metadata import version

    return version("koi")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="koi", description="Plan LLM inference fleets across clouds, GPUs and markets."
    )
    parser.add_argument("--version", action="version", version=f"koi {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _COMMANDS:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        code: int = args.handler(args)
    except KoiError as exc:
        print(f"koi: error: {exc}", file=sys.stderr)
        return 1
    return code
