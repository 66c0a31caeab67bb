"""The koi exception tree.

Every error koi raises derives from :class:`KoiError`; each subclass also derives from the
builtin a caller would naturally catch (``ValueError`` for bad input, ``RuntimeError`` for a
solver that failed).  No pluggy or highspy exception escapes the library.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "CycleError",
    "DeadlineError",
    "InfeasibleError",
    "InvalidInput",
    "KoiError",
    "KoiWarning",
    "PluginError",
    "SolverError",
    "SolverLimitError",
    "StateError",
    "read_text",
]


class KoiError(Exception):
    """Root of every error raised by koi."""


class InvalidInput(KoiError, ValueError):
    """A value, file or message given to koi is malformed; the message names what and where."""


class CycleError(InvalidInput):
    """An edge would break the X -> V -> Y structure of the causal graph."""


class PluginError(KoiError):
    """A plugin raised or returned something invalid; ``plugin`` names it."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"plugin {plugin!r}: {message}")
        self.plugin = plugin


class SolverError(KoiError, RuntimeError):
    """An optimisation backend failed."""


class InfeasibleError(SolverError):
    """The optimisation problem has no feasible solution."""


class SolverLimitError(SolverError):
    """A time or node limit was reached before any incumbent was found."""


class DeadlineError(KoiError, TimeoutError):
    """A tick ran out of its wall-clock deadline (``PlannerConfig.tick_deadline_s``)."""


class StateError(KoiError, RuntimeError):
    """A planner checkpoint is missing, corrupt, or from a newer schema version."""


class KoiWarning(UserWarning):
    """Something was ignored or degraded, and the caller should know."""


def read_text(path: str | os.PathLike[str], *, what: str = "") -> str:
    """The UTF-8 text of the file at ``path``, or :class:`InvalidInput` naming the file (and
    ``what`` it was meant to be) when it cannot be read or is not UTF-8."""
    label = f"cannot read {what}".rstrip()
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"{os.fspath(path)}: {label} ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        msg = f"{os.fspath(path)}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise InvalidInput(msg) from None
