"""A stand-in for the ``sky`` package's client API, enough for the SkyPilot launcher.

SkyPilot's SDK returns a request id from every call and ``sky.get(request_id)`` waits for the
result; here a request is a thunk that ``get`` runs.  Services keep a version and a replica
count; ``ready_cap[name]`` limits how many replicas of the latest version become READY (the
older version's replicas stay READY, as in a blue-green update).  ``fail[op]`` makes that
operation (``up``, ``update``, ``status``, ``down``, ``task``) raise.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any


class UpdateMode(enum.Enum):
    ROLLING = "rolling"
    BLUE_GREEN = "blue_green"


class StubTask:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config


class StubSky:
    def __init__(self) -> None:
        self.services: dict[str, dict[str, Any]] = {}
        self.ready_cap: dict[str, int] = {}
        self.fail: dict[str, Exception] = {}
        self.calls: list[tuple[str, str]] = []
        self.update_modes: list[UpdateMode] = []
        self.Task = SimpleNamespace(from_yaml_config=self._from_yaml_config)
        self.serve = SimpleNamespace(
            up=self._up,
            update=self._update,
            status=self._status,
            down=self._down,
            UpdateMode=UpdateMode,
        )

    def get(self, request: Callable[[], Any]) -> Any:
        return request()

    def _check(self, op: str, name: str) -> None:
        self.calls.append((op, name))
        if op in self.fail:
            raise self.fail[op]

    def _from_yaml_config(self, config: dict[str, Any]) -> StubTask:
        self._check("task", str(config.get("name")))
        unknown = set(config) - {"name", "resources", "service", "run", "setup", "envs"}
        if unknown:
            raise ValueError(f"Invalid task YAML: unknown fields {sorted(unknown)}")
        acc = config["resources"]["accelerators"]
        if not re.fullmatch(r"[A-Za-z0-9-]+:[0-9]+", acc):
            raise ValueError(f"Invalid accelerators {acc!r}")
        policy = config["service"]["replica_policy"]
        if policy["min_replicas"] > policy["max_replicas"]:
            raise ValueError("min_replicas > max_replicas")
        return StubTask(config)

    def _replicas(self, task: StubTask) -> int:
        return int(task.config["service"]["replica_policy"]["min_replicas"])

    def _up(self, task: StubTask, service_name: str) -> Callable[[], Any]:
        def run() -> tuple[str, str]:
            self._check("up", service_name)
            if service_name in self.services:
                raise RuntimeError(f"service {service_name} already exists")
            self.services[service_name] = {
                "version": 1,
                "replicas": {1: self._replicas(task)},
                "config": task.config,
            }
            return service_name, "http://127.0.0.1:30001"

        return run

    def _update(self, task: StubTask, service_name: str, mode: UpdateMode) -> Callable[[], Any]:
        def run() -> None:
            self._check("update", service_name)
            self.update_modes.append(mode)
            svc = self.services[service_name]
            svc["version"] += 1
            svc["replicas"][svc["version"]] = self._replicas(task)
            svc["config"] = task.config

        return run

    def _status(self, names: Any) -> Callable[[], Any]:
        def run() -> list[dict[str, Any]]:
            self._check("status", str(names))
            out = []
            for name, svc in sorted(self.services.items()):
                info = []
                for version, n in svc["replicas"].items():
                    latest = version == svc["version"]
                    ready = min(n, self.ready_cap.get(name, n)) if latest else n
                    for k in range(n):
                        status = "READY" if k < ready else "STARTING"
                        info.append(
                            {"replica_id": len(info) + 1, "version": version, "status": status}
                        )
                out.append(
                    {
                        "name": name,
                        "version": svc["version"],
                        "status": "READY",
                        "replica_info": info,
                    }
                )
            return out

        return run

    def _down(self, service_names: str) -> Callable[[], Any]:
        def run() -> None:
            self._check("down", service_names)
            self.services.pop(service_names, None)

        return run
