"""Where benchmark runs execute: this process, a local process pool, or a Dask cluster.

Every choice is a :class:`concurrent.futures.Executor`, so the bench and the sweep submit runs
and collect them the same way whatever executes them.  Dask (the optional ``koi[dask]`` extra)
runs them on a ``LocalCluster`` of worker processes, or on a running scheduler when given its
address; a run whose worker dies is rescheduled on another worker by Dask's scheduler.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any, Literal, ParamSpec, TypeVar

import attrs

from koi.errors import InvalidInput

__all__ = ["ExecutorSpec", "InlineExecutor", "open_executor", "parse_executor"]

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Seconds to wait for a running Dask scheduler to answer before giving up.
_CONNECT_TIMEOUT_S = 30.0


@attrs.frozen
class ExecutorSpec:
    """``process`` (a process pool; ``--jobs 1`` runs in this process) or ``dask`` (a
    ``LocalCluster`` when ``address`` is ``None``, else the scheduler at ``address``)."""

    kind: Literal["process", "dask"] = "process"
    address: str | None = None

    def __str__(self) -> str:
        return self.kind if self.address is None else f"{self.kind}={self.address}"


def parse_executor(text: str) -> ExecutorSpec:
    """``process``, ``dask`` or ``dask=ADDRESS`` (e.g. ``dask=tcp://10.0.0.5:8786``)."""
    kind, sep, address = text.strip().partition("=")
    if kind == "process" and not sep:
        return ExecutorSpec("process")
    if kind == "dask":
        if sep and not address.strip():
            raise InvalidInput("--executor: 'dask=' needs a scheduler address after '='")
        return ExecutorSpec("dask", address.strip() or None)
    raise InvalidInput(f"--executor: expected 'process', 'dask' or 'dask=ADDRESS', got {text!r}")


class InlineExecutor(Executor):
    """Runs each submitted call at once in this process (one worker: no pool to start)."""

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def _dask_client(spec: ExecutorSpec, workers: int, stack: ExitStack) -> Any:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise InvalidInput(
            "--executor dask: needs the optional 'distributed' package (pip install 'koi[dask]')"
        ) from None
    if spec.address is None:
        # Worker processes, one thread each: a run holds the GIL for its whole length.
        cluster = stack.enter_context(
            LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                # No dashboard; the scheduler's small HTTP server on any free local port
                # (by default it wants 8787, and warns when another cluster holds it).
                dashboard_address=None,
                scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            )
        )
        return stack.enter_context(Client(cluster))  # type: ignore[no-untyped-call]
    try:
        client = Client(spec.address, timeout=_CONNECT_TIMEOUT_S)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise InvalidInput(
            f"--executor: cannot reach the Dask scheduler at {spec.address!r}: {exc}"
        ) from None
    return stack.enter_context(client)


@contextmanager
def open_executor(spec: ExecutorSpec, workers: int | None = None) -> Iterator[Executor]:
    """An executor for ``spec`` with ``workers`` workers (default: the CPU count), closed (and a
    ``LocalCluster`` it started shut down) on exit.

    A running Dask scheduler keeps its own workers; ``workers`` does not apply to it.
    """
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise InvalidInput(f"--jobs: must be >= 1, got {n}")
    with ExitStack() as stack:
        if spec.kind == "dask":
            client = _dask_client(spec, n, stack)
            # pure=False: two identical runs are two tasks, never one cached result.
            yield client.get_executor(pure=False)
        elif n == 1:
            yield InlineExecutor()
        else:
            yield stack.enter_context(ProcessPoolExecutor(max_workers=n))
