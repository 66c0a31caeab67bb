"""The one marker pair of the ``koi`` hook namespace."""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

#: pluggy project name; also the entry-point group plugins are published under.
PROJECT = "koi"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
