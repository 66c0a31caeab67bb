"""Plans in, manifests out: reading ``koi plan --json`` and writing YAML.

Shared by ``koi render``, the Kubernetes launcher's ``advisory`` mode and the SkyPilot
launcher, so that a manifest a team commits to Git and one a launcher applies are the same.

.. versionadded:: 0.1
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from koi.errors import InvalidInput
from koi.types import JobAction, Ladder, Plan, from_data

__all__ = [
    "TARGETS",
    "LaunchMode",
    "poll_until",
    "ranks_on",
    "read_plan",
    "shortfall",
    "to_mode",
    "to_yaml",
    "write_files",
]

#: what ``koi render --target`` accepts
TARGETS = ("k8s", "skypilot")


class LaunchMode(enum.StrEnum):
    """What ``koi_launch`` does with a plan.

    - ``advisory``: write the manifests to ``out_dir``; touch no cluster.
    - ``dry_run``: check every object where it would go without changing anything (the
      Kubernetes API server with ``dryRun=All``; SkyPilot's own task validation) and report.
    - ``apply``: check first, then apply, wait (bounded) for readiness, and retire the
      replaced workloads make-before-break.

    .. versionadded:: 0.1
    """

    ADVISORY = "advisory"
    DRY_RUN = "dry_run"
    APPLY = "apply"


def to_mode(value: Any) -> LaunchMode:
    try:
        return LaunchMode(str(value).replace("-", "_"))
    except ValueError:
        known = [m.value for m in LaunchMode]
        raise InvalidInput(f"mode: must be one of {known}, got {value!r}") from None


def poll_until(
    done: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Call ``done`` until it says so or ``timeout_s`` has passed: a launcher's bounded wait.

    ``done`` is called at least once, and once more right at the deadline.
    """
    deadline = clock() + timeout_s
    while not done() and clock() < deadline:
        sleep(min(interval_s, max(0.0, deadline - clock())))


def shortfall(ready: int, wanted: int, *, waited_s: float, patient: bool) -> str:
    """How a rank fell short, worded the same by every launcher ("" when it did not).

    >>> shortfall(1, 3, waited_s=900, patient=True)
    '1 of 3 replicas ready after 900 s'
    """
    if ready >= wanted:
        return ""
    return f"{ready} of {wanted} replicas ready " + (
        f"after {waited_s:g} s" if patient else "(kept)"
    )


def read_plan(data: Any, *, where: str = "plan") -> Plan:
    """A :class:`~koi.types.Plan` from the JSON of ``koi plan --json`` or of ``to_data(plan)``.

    ``koi plan --json`` lists ``jobs`` with ``job_id``, ``action`` and ``ladder``; the plain
    form lists ``actions``.  Errors name the path, e.g.
    ``plan.json: jobs[0].ladder.ranks[0].replicas: must be an integer >= 1, got 0``.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{where}: expected a JSON object, got {type(data).__name__}")
    if "actions" in data:
        return from_data(data, Plan, where=where)
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        msg = f"{where}: expected the output of `koi plan --json` (a 'jobs' list) or a Plan"
        raise InvalidInput(msg)
    actions = []
    for k, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise InvalidInput(f"{where}: jobs[{k}]: expected an object, got {job!r}")
        missing = [f for f in ("job_id", "action", "ladder") if f not in job]
        if missing:
            raise InvalidInput(f"{where}: jobs[{k}]: missing {missing}")
        item = {
            "job_id": job["job_id"],
            "kind": job["action"],
            "ladder": job["ladder"],
            "reason": job.get("reason") or "",
        }
        actions.append(from_data(item, JobAction, where=f"{where}: jobs[{k}]"))
    try:
        return Plan(data.get("time_s", 0.0), actions)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def ranks_on(ladder: Ladder, clouds: Iterable[str] | None) -> Ladder:
    """The part of ``ladder`` whose environments are on ``clouds`` (all of it for ``None``)."""
    if clouds is None:
        return ladder
    wanted = set(clouds)
    return Ladder(tuple(r for r in ladder.ranks if r.chain.environment.cloud in wanted))


def to_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    """Documents as one multi-document YAML text, keys in the order they were built."""
    try:
        import yaml
    except ImportError:
        msg = "writing YAML needs PyYAML: pip install 'koi[render]' (or koi[k8s], koi[skypilot])"
        raise InvalidInput(msg) from None

    class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
        """Multi-line strings (a ``run`` script) as literal blocks; no anchors or aliases."""

        def ignore_aliases(self, data: object) -> bool:
            return True

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    docs = [dict(d) for d in documents]
    return str(yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=4096))


def write_files(files: Mapping[str, str], out: str | os.PathLike[str]) -> list[Path]:
    """Write ``name -> text`` into the folder ``out`` (created if missing); return the paths."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in sorted(files.items()):
            path = folder / name
            path.write_text(text, encoding="utf-8")
            paths.append(path)
    except OSError as exc:
        raise InvalidInput(f"{folder}: cannot write manifests ({exc.strerror})") from None
    return paths
