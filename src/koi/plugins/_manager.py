"""The plugin-manager factory: no module-level manager, nothing loaded at import time."""

from __future__ import annotations

import importlib.metadata
import types
from collections.abc import Iterable

import pluggy

from koi.errors import PluginError
from koi.plugins import hookspecs
from koi.plugins._markers import PROJECT

__all__ = ["make_plugin_manager", "plugin_name"]


def plugin_name(plugin: object) -> str:
    """The name a plugin is registered under.

    ``plugin.koi_plugin_name`` when set, else the module name for a module, else the class
    name.  Names are stable across runs, so ordering by name is deterministic (pluggy's
    default name, ``id(plugin)``, is not).
    """
    name = getattr(plugin, "koi_plugin_name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    return type(plugin).__name__


def _register(pm: pluggy.PluginManager, plugin: object, name: str) -> None:
    if isinstance(plugin, type):
        msg = f"register plugin instances, not classes: use {plugin.__name__}(...)"
        raise PluginError(name, msg)
    if pm.is_blocked(name):
        return
    if pm.has_plugin(name):
        msg = "another plugin is registered under this name; set koi_plugin_name to tell them apart"
        raise PluginError(name, msg)
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        raise PluginError(name, str(exc)) from None
    except ValueError as exc:  # pluggy: the same object registered twice
        raise PluginError(name, str(exc)) from None
    for caller in pm.get_hookcallers(plugin) or ():
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and (impl.hookwrapper or impl.wrapper):
                pm.unregister(plugin)
                msg = f"{caller.name}: hook wrappers are not supported for koi hooks"
                raise PluginError(name, msg)


def _entry_point_plugins(blocked: set[str]) -> list[tuple[str, object]]:
    found = importlib.metadata.entry_points(group=PROJECT)
    out: list[tuple[str, object]] = []
    for ep in sorted(found, key=lambda e: e.name):
        if ep.name in blocked:
            continue  # never import a blocked plugin
        try:
            plugin = ep.load()
        except Exception as exc:  # an entry point can fail in any way while importing
            msg = f"entry point {ep.value!r} failed to load: {type(exc).__name__}: {exc}"
            raise PluginError(ep.name, msg) from exc
        out.append((ep.name, plugin))
    return out


def make_plugin_manager(
    *,
    plugins: Iterable[object] = (),
    entry_points: bool = True,
    blocked: Iterable[str] = (),
) -> pluggy.PluginManager:
    """Build a fresh plugin manager for the ``koi`` hooks.

    Parameters
    ----------
    plugins
        Plugin instances or modules to register, in order.  Each is named by
        :func:`plugin_name`; two plugins with one name are an error.
    entry_points
        Also load every plugin published under the ``koi`` entry-point group (named by the
        entry point).  Hosts that embed koi usually pass ``False`` and list their plugins.
    blocked
        Plugin names that must not be registered (blocked entry points are never imported).

    Returns
    -------
    pluggy.PluginManager
        A manager with the koi hookspecs; wrap it in :class:`koi.plugins.PluginHost` to call it.

    Raises
    ------
    PluginError
        A class was passed instead of an instance, a name is taken twice, an entry point fails
        to import, an implementation's signature does not match its spec, a plugin implements an
        unknown ``koi_*`` hook, or uses a hook wrapper.

    .. versionadded:: 0.1
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    blocked_names = set(blocked)
    for name in sorted(blocked_names):
        pm.set_blocked(name)
    for plugin in plugins:
        _register(pm, plugin, plugin_name(plugin))
    if entry_points:
        for name, plugin in _entry_point_plugins(blocked_names):
            _register(pm, plugin, name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(pm.get_name(exc.plugin) or plugin_name(exc.plugin), str(exc)) from None
    return pm
