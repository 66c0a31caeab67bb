"""``koi.toml``: the agent's configuration file, read with errors that name the file and key."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import math
import tomllib
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from koi.config import KoiConfig, with_knobs
from koi.errors import InvalidInput, KoiError, read_text
from koi.plugins import PROJECT

__all__ = ["AgentConfig", "PluginSpec", "load_config", "load_plugin", "parse_config"]

_AGENT_KEYS = {
    "tick_s",
    "state",
    "host",
    "port",
    "dry_run",
    "max_ticks",
    "entry_points",
    "blocked",
    "at_risk_breach",
}


@attrs.frozen
class PluginSpec:
    """One ``[[plugins]]`` table: what to load (``use``) and the options to build it with.

    ``use`` is ``"module:attribute"`` or the name of an entry point of the ``koi`` group.  A
    class or a function is called with ``options`` as keyword arguments; a module or an
    instance is registered as it is (and then takes no options).
    """

    use: str
    options: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    where: str = "plugins[0]"


@attrs.frozen
class AgentConfig:
    """Everything ``koi agent`` needs; see ``docs/operations.md`` for the file format.

    .. versionadded:: 0.1
    """

    plugins: tuple[PluginSpec, ...]
    tick_s: float = 60.0
    state: Path | None = None
    host: str = "127.0.0.1"
    port: int = 9464
    dry_run: bool = False
    max_ticks: int = 0
    entry_points: bool = False
    blocked: tuple[str, ...] = ()
    at_risk_breach: float = 0.1
    koi: KoiConfig = attrs.field(factory=KoiConfig)
    source: str = "<config>"


def _fail(source: str, key: str, message: str) -> InvalidInput:
    return InvalidInput(f"{source}: {key}: {message}")


def _number(source: str, key: str, value: object, *, low: float, integer: bool = False) -> Any:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise _fail(
            source, key, f"must be {'an integer' if integer else 'a number'}, got {value!r}"
        )
    if not (low <= value < math.inf):
        raise _fail(source, key, f"must be >= {low:g}, got {value!r}")
    return value


def _knobs(prefix: str, table: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``{"planner": {"tau": 0.2}}`` -> ``[("planner.tau", 0.2)]``."""
    out: list[tuple[str, Any]] = []
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.extend(_knobs(path, value))
        else:
            out.append((path, value))
    return out


def _koi_config(source: str, data: object) -> KoiConfig:
    """``[koi.<section>]`` tables set fields of :class:`KoiConfig` (as :func:`with_knobs`)."""
    if not isinstance(data, Mapping):
        raise _fail(source, "koi", "must be a table of [koi.<section>] tables")
    cfg = KoiConfig()
    for path, value in _knobs("", data):
        try:
            cfg = with_knobs(cfg, {path: value})
        except KoiError as exc:
            raise _fail(source, f"koi.{path}", str(exc)) from None
    return cfg


def parse_config(data: Mapping[str, Any], *, source: str = "<config>") -> AgentConfig:
    """Build an :class:`AgentConfig` from parsed TOML; errors name ``source`` and the key."""
    unknown = sorted(set(data) - {"agent", "plugins", "koi"})
    if unknown:
        raise _fail(source, unknown[0], "unknown table (expected [agent], [[plugins]], [koi.*])")
    agent = data.get("agent", {})
    if not isinstance(agent, Mapping):
        raise _fail(source, "agent", "must be a table")
    for key in agent:
        if key not in _AGENT_KEYS:
            raise _fail(
                source, f"agent.{key}", f"unknown setting (known: {', '.join(sorted(_AGENT_KEYS))})"
            )
    kw: dict[str, Any] = {}
    if "tick_s" in agent:
        kw["tick_s"] = float(_number(source, "agent.tick_s", agent["tick_s"], low=0.0))
        if kw["tick_s"] <= 0:
            raise _fail(source, "agent.tick_s", f"must be > 0, got {agent['tick_s']!r}")
    if "state" in agent:
        state = agent["state"]
        if not isinstance(state, str) or not state:
            raise _fail(source, "agent.state", f"must be a file path, got {state!r}")
        kw["state"] = Path(state)
    if "host" in agent:
        host = agent["host"]
        if not isinstance(host, str) or not host:
            raise _fail(source, "agent.host", f"must be an address, got {host!r}")
        kw["host"] = host
    if "port" in agent:
        port = _number(source, "agent.port", agent["port"], low=0, integer=True)
        if port > 65535:
            raise _fail(source, "agent.port", f"must be <= 65535, got {port}")
        kw["port"] = port
    for key in ("dry_run", "entry_points"):
        if key in agent:
            if not isinstance(agent[key], bool):
                raise _fail(source, f"agent.{key}", f"must be true or false, got {agent[key]!r}")
            kw[key] = agent[key]
    if "max_ticks" in agent:
        kw["max_ticks"] = _number(
            source, "agent.max_ticks", agent["max_ticks"], low=0, integer=True
        )
    if "at_risk_breach" in agent:
        v = float(_number(source, "agent.at_risk_breach", agent["at_risk_breach"], low=0.0))
        if v > 1:
            raise _fail(source, "agent.at_risk_breach", f"must be in [0, 1], got {v}")
        kw["at_risk_breach"] = v
    if "blocked" in agent:
        blocked = agent["blocked"]
        if not isinstance(blocked, list) or not all(isinstance(b, str) for b in blocked):
            raise _fail(source, "agent.blocked", "must be a list of plugin names")
        kw["blocked"] = tuple(blocked)
    raw_plugins = data.get("plugins", [])
    if not isinstance(raw_plugins, list):
        raise _fail(source, "plugins", "must be an array of tables: [[plugins]]")
    specs = []
    for k, table in enumerate(raw_plugins):
        where = f"plugins[{k}]"
        if not isinstance(table, Mapping):
            raise _fail(source, where, "must be a table")
        use = table.get("use")
        if not isinstance(use, str) or not use.strip():
            raise _fail(
                source, f"{where}.use", "must name a plugin: 'module:attribute' or an entry point"
            )
        options = {key: v for key, v in table.items() if key != "use"}
        specs.append(PluginSpec(use.strip(), options, where))
    if not specs and not kw.get("entry_points", False):
        raise _fail(source, "plugins", "no plugin is named (add [[plugins]] tables)")
    if "koi" in data:
        kw["koi"] = _koi_config(source, data["koi"])
    return AgentConfig(plugins=tuple(specs), source=source, **kw)


def load_config(path: str | Path) -> AgentConfig:
    """Read ``path`` (TOML).

    Raises
    ------
    InvalidInput
        The file cannot be read, is not TOML, or a key is unknown or invalid; the message names
        the file and the key.
    """
    path = Path(path)
    text = read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise InvalidInput(f"{path}: TOML nested too deeply") from None
    return parse_config(data, source=str(path))


def _resolve(spec: PluginSpec, source: str) -> object:
    key = f"{spec.where}.use"
    if ":" in spec.use:
        module_name, _, attr = spec.use.partition(":")
        try:
            obj: object = importlib.import_module(module_name)
        except (ImportError, ValueError) as exc:  # ValueError: an empty module name
            raise _fail(source, key, f"cannot import {module_name!r} ({exc})") from None
        for part in attr.split(".") if attr else ():
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise _fail(source, key, f"{module_name!r} has no attribute {attr!r}") from None
        return obj
    found = importlib.metadata.entry_points(group=PROJECT, name=spec.use)
    if not found:
        msg = f"no entry point {spec.use!r} in group {PROJECT!r}; use 'module:attribute'"
        raise _fail(source, key, msg)
    ep = next(iter(found))
    try:
        return ep.load()
    except Exception as exc:  # an entry point can fail in any way while importing
        raise _fail(source, key, f"entry point {ep.value!r} failed to load: {exc}") from None


def load_plugin(spec: PluginSpec, *, source: str = "<config>") -> object:
    """Import and build the plugin ``spec`` names.

    Raises
    ------
    InvalidInput
        It cannot be imported, takes no such option, or refused its options; the message names
        the file and the ``[[plugins]]`` table.
    """
    obj = _resolve(spec, source)
    if isinstance(obj, types.ModuleType) or not callable(obj):
        if spec.options:
            bad = sorted(spec.options)
            raise _fail(source, f"{spec.where}.{bad[0]}", f"{spec.use} takes no options")
        return obj
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        accepted = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for option in spec.options:
            if option not in accepted and not takes_any:
                known = ", ".join(accepted) or "none"
                msg = f"unknown option for {spec.use} (it takes: {known})"
                raise _fail(source, f"{spec.where}.{option}", msg)
        try:
            signature.bind(**spec.options)
        except TypeError as exc:
            raise _fail(source, spec.where, f"{spec.use}: {exc}") from None
    try:
        return obj(**spec.options)
    except KoiError as exc:
        raise _fail(source, spec.where, f"{spec.use}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise _fail(source, spec.where, f"{spec.use}: {exc}") from None
