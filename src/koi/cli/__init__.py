"""The ``koi`` command line.

Each sub-command lives in its own private module exposing ``register(subparsers)``; the
module's handler receives the parsed namespace and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
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
    "koi.cli._render",
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
        return _fail(str(exc))
    except BrokenPipeError:  # the reader went away (``koi ... | head``): nothing left to say
        _detach_stdout()
        return 1
    except UnicodeDecodeError as exc:
        return _fail(f"input is not UTF-8 text ({exc.reason} at byte {exc.start})")
    except RecursionError:
        return _fail("input is nested too deeply")
    except OSError as exc:  # an unreadable input or an unwritable output
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or type(exc).__name__}")
    return code


def _fail(message: str) -> int:
    """One line on stderr, never a traceback, and exit code 2 like argparse's own usage errors
    (bad input, an unreadable file, an unwritable output)."""
    print(f"koi: error: {message}", file=sys.stderr)
    return 2


def _detach_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
