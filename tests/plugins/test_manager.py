"""make_plugin_manager: explicit plugins, entry points, blocking and every registration error."""

from __future__ import annotations

import importlib.metadata
import types
from typing import Any

import pytest

from koi.errors import PluginError
from koi.plugins import PROJECT, PluginHost, hookimpl, make_plugin_manager, plugin_name
from koi.testing.fakes import example_snapshot


class Snapshotter:
    @hookimpl
    def koi_snapshot(self, now: float) -> Any:
        return example_snapshot(now)


class Named:
    koi_plugin_name = "named-plugin"

    @hookimpl
    def koi_plan_committed(self, plan: Any, report: Any) -> None:
        return None


def test_explicit_plugins_without_entry_points() -> None:
    pm = make_plugin_manager(plugins=[Snapshotter(), Named()], entry_points=False)
    assert PluginHost(pm).plugin_names == ("Snapshotter", "named-plugin")
    assert PluginHost(pm).snapshot(5.0) == example_snapshot(5.0)


def test_no_plugins_means_no_answers() -> None:
    host = PluginHost(make_plugin_manager(entry_points=False))
    assert host.plugin_names == ()
    assert host.snapshot(0.0) is None


def test_managers_share_nothing() -> None:
    a = make_plugin_manager(plugins=[Snapshotter()], entry_points=False)
    b = make_plugin_manager(entry_points=False)
    assert a is not b
    assert PluginHost(b).plugin_names == ()


def test_module_plugins_are_named_by_module() -> None:
    module = types.ModuleType("acme_koi_plugin")

    @hookimpl
    def koi_snapshot(now: float) -> None:
        return None

    module.koi_snapshot = koi_snapshot  # type: ignore[attr-defined]
    assert plugin_name(module) == "acme_koi_plugin"
    pm = make_plugin_manager(plugins=[module], entry_points=False)
    assert PluginHost(pm).plugin_names == ("acme_koi_plugin",)


def test_a_class_instead_of_an_instance_is_an_error() -> None:
    with pytest.raises(PluginError, match=r"instances, not classes: use Snapshotter\(\.\.\.\)"):
        make_plugin_manager(plugins=[Snapshotter], entry_points=False)


def test_two_plugins_with_one_name_are_an_error() -> None:
    with pytest.raises(PluginError, match="koi_plugin_name") as info:
        make_plugin_manager(plugins=[Snapshotter(), Snapshotter()], entry_points=False)
    assert info.value.plugin == "Snapshotter"


def test_blocked_plugins_are_not_registered() -> None:
    pm = make_plugin_manager(
        plugins=[Snapshotter(), Named()], entry_points=False, blocked=["Snapshotter"]
    )
    assert PluginHost(pm).plugin_names == ("named-plugin",)


def test_wrong_argument_names_name_the_plugin() -> None:
    class Typo:
        @hookimpl
        def koi_snapshot(self, time: float) -> None:
            return None

    with pytest.raises(PluginError, match="time") as info:
        make_plugin_manager(plugins=[Typo()], entry_points=False)
    assert info.value.plugin == "Typo"
    assert type(info.value) is PluginError  # not a pluggy exception


def test_unknown_koi_hook_is_an_error() -> None:
    class Future:
        @hookimpl
        def koi_teleport(self, where: str) -> None:
            return None

    with pytest.raises(PluginError, match="koi_teleport") as info:
        make_plugin_manager(plugins=[Future()], entry_points=False)
    assert info.value.plugin == "Future"


def test_hook_wrappers_are_refused() -> None:
    class Wrapper:
        @hookimpl(wrapper=True)
        def koi_snapshot(self, now: float) -> Any:
            return (yield)

    with pytest.raises(PluginError, match="wrappers are not supported"):
        make_plugin_manager(plugins=[Wrapper()], entry_points=False)


def test_unmarked_methods_are_ignored() -> None:
    class Plain:
        def koi_snapshot(self, now: float) -> None:  # not marked: not a hook
            raise AssertionError("never called")

    host = PluginHost(make_plugin_manager(plugins=[Plain()], entry_points=False))
    assert host.snapshot(0.0) is None


def _entry_points(*specs: tuple[str, str]) -> Any:
    eps = [importlib.metadata.EntryPoint(name, value, PROJECT) for name, value in specs]

    def fake(*, group: str) -> list[importlib.metadata.EntryPoint]:
        assert group == PROJECT
        return eps

    return fake


def test_entry_points_are_loaded_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _entry_points(("zeta", "koi.testing.fakes"), ("alpha", "json")),
    )
    pm = make_plugin_manager()
    assert PluginHost(pm).plugin_names == ("alpha", "zeta")


def test_entry_points_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", _entry_points(("x", "nope_nope")))
    assert PluginHost(make_plugin_manager(entry_points=False)).plugin_names == ()


def test_a_broken_entry_point_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata, "entry_points", _entry_points(("broken", "koi_no_such_module_xyz"))
    )
    with pytest.raises(PluginError, match="failed to load: ModuleNotFoundError") as info:
        make_plugin_manager()
    assert info.value.plugin == "broken"


def test_a_blocked_entry_point_is_never_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata, "entry_points", _entry_points(("broken", "koi_no_such_module_xyz"))
    )
    pm = make_plugin_manager(blocked=["broken"])
    assert PluginHost(pm).plugin_names == ()


def test_an_entry_point_class_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        _entry_points(("fleet", "koi.testing.fakes:StaticFleet")),
    )
    with pytest.raises(PluginError, match="not classes") as info:
        make_plugin_manager()
    assert info.value.plugin == "fleet"
