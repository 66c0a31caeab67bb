"""koi's plugin API: hook markers, hookspecs, the manager factory and the typed facade.

A plugin is a module or an object whose ``koi_*`` functions are marked with
:data:`koi.plugins.hookimpl`; :mod:`koi.plugins.hookspecs` documents every hook.  Pass plugins to
:func:`make_plugin_manager` explicitly, or publish them under the ``koi`` entry-point group so
that ``make_plugin_manager(entry_points=True)`` finds them::

    # pyproject.toml of your package
    [project.entry-points.koi]
    mycloud = "koi_mycloud.plugin"      # a module, or an instance, carrying @koi.hookimpl functions

Nothing here is global: every manager is built fresh, and ``import koi.plugins`` neither scans
entry points nor reads the environment.  See ``docs/plugins.md`` for a worked example.
"""

from __future__ import annotations

from koi.candidates import ProposalContext
from koi.plugins import hookspecs
from koi.plugins._checks import ladder_key, ladder_problems
from koi.plugins._context import (
    LaunchBatch,
    MechanismBatch,
    ProposalBatch,
    Rejection,
    TelemetryBatch,
)
from koi.plugins._default_proposer import DEFAULT_PROPOSER, DefaultProposer
from koi.plugins._host import PluginHost
from koi.plugins._llm import LlmProposer
from koi.plugins._llm_config import LlmConfig
from koi.plugins._manager import make_plugin_manager, plugin_name
from koi.plugins._markers import PROJECT, hookimpl, hookspec
from koi.plugins._redact import redact

__all__ = [
    "DEFAULT_PROPOSER",
    "PROJECT",
    "DefaultProposer",
    "LaunchBatch",
    "LlmConfig",
    "LlmProposer",
    "MechanismBatch",
    "PluginHost",
    "ProposalBatch",
    "ProposalContext",
    "Rejection",
    "TelemetryBatch",
    "hookimpl",
    "hookspec",
    "hookspecs",
    "ladder_key",
    "ladder_problems",
    "make_plugin_manager",
    "plugin_name",
    "redact",
]
