"""Runs on a real Dask cluster (2 worker processes on 127.0.0.1) give the process pool's results,
and a run whose worker is killed is retried elsewhere."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from koi.bench import (
    ExecutorSpec,
    RunTask,
    execute,
    open_executor,
    parse_executor,
    run_bench,
    run_tasks,
)
from koi.cli import main
from koi.errors import InvalidInput
from koi.sim import load_scenario

distributed = pytest.importorskip("distributed", reason="the koi[dask] extra is not installed")
cloudpickle = pytest.importorskip("cloudpickle")

TINY = Path(__file__).with_name("tiny.toml")
PLANNERS = ["koi", "thompson"]  # koi's planner, and one that draws random numbers

# The workers import this module's functions by value: a test module is not importable there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as c:
        yield c


def decisions(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a run decided and scored, without the wall-clock times it took."""
    metrics = {k: v for k, v in record["metrics"].items() if not k.startswith("plan_time")}
    series = {k: v for k, v in record["series"].items() if k != "plan_time_s"}
    calibration = [
        {k: v for k, v in tick.items() if k != "timings_s"} for tick in record["calibration"] or ()
    ]
    return {
        "planner": record["planner"],
        "seed": record["seed"],
        "metrics": metrics,
        "series": series,
        "calibration": calibration,
    }


def test_same_seeds_give_the_same_runs_on_the_process_pool_and_on_dask(cluster: Any) -> None:
    pool = run_bench(TINY, PLANNERS, seeds=2, jobs=2, executor=ExecutorSpec("process"))
    dask = run_bench(
        TINY, PLANNERS, seeds=2, executor=ExecutorSpec("dask", cluster.scheduler_address)
    )
    assert [decisions(r) for r in dask.runs] == [decisions(r) for r in pool.runs]
    assert [(r["planner"], r["seed"]) for r in dask.runs] == [
        (p, s) for p in PLANNERS for s in (0, 1)
    ]
    # Two seeds of the world are two different runs: the comparison can tell runs apart.
    assert decisions(pool.runs[0])["metrics"] != decisions(pool.runs[1])["metrics"]


def die_once(marker: Path, task: RunTask) -> dict[str, Any]:
    """The first attempt at seed 0 writes its process id to ``marker`` and waits to be killed;
    every other attempt runs normally."""
    if task.seed == 0:
        with contextlib.suppress(FileExistsError), marker.open("x") as f:
            f.write(str(os.getpid()))
            f.flush()
            time.sleep(120)
            return {"not": "killed"}
    return execute(task)


def test_a_killed_workers_run_is_retried_on_another_worker(cluster: Any, tmp_path: Path) -> None:
    marker = tmp_path / "attempt-pid"
    killed: list[int] = []

    def kill_when_started() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                pid = int(marker.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    sc = load_scenario(TINY)
    tasks = [RunTask(sc, "fcfs", seed) for seed in (0, 1)]
    killer = threading.Thread(target=kill_when_started, daemon=True)
    killer.start()
    records = run_tasks(
        tasks,
        executor=ExecutorSpec("dask", cluster.scheduler_address),
        worker=partial(die_once, marker),
    )
    killer.join(timeout=1)
    assert killed, "no attempt reached the worker"
    # The first attempt died with its worker; the retry ran the real thing.
    assert [decisions(r) for r in records] == [decisions(execute(t)) for t in tasks]
    with distributed.Client(cluster.scheduler_address) as client:
        assert killed[0] not in client.run(os.getpid).values()


def test_bench_runs_on_a_dask_scheduler_and_sweep_on_a_local_cluster(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = cluster.scheduler_address
    out = tmp_path / "bench"
    args = ["bench", "--scenario", str(TINY), "--planners", "fcfs", "--seeds", "1"]
    args += ["--executor", f"dask={address}", "--json", "--no-plots", "--out", str(out)]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["planners"]["fcfs"]["seeds"] == [0]
    assert (out / "traces" / "fcfs-seed0.json").exists()  # written here, not by the worker

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        f'[sweep]\nscenarios = ["{TINY.as_posix()}"]\nplanners = ["fcfs"]\nseeds = [1]\n'
    )
    out = tmp_path / "sweep"
    args = ["sweep", str(sweep), "--executor", "dask", "--jobs", "1", "--jsonl", "--out", str(out)]
    assert main(args) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["planner"], x["seed"], x["knobs"]) for x in lines] == [("fcfs", 1, {})]


def test_executor_names_parse_and_bad_ones_fail_cleanly() -> None:
    assert parse_executor("process") == ExecutorSpec("process")
    assert parse_executor("dask") == ExecutorSpec("dask")
    assert parse_executor("dask=tcp://127.0.0.1:8786") == ExecutorSpec(
        "dask", "tcp://127.0.0.1:8786"
    )
    for bad in ("threads", "dask=", "process=x", ""):
        with pytest.raises(InvalidInput, match="--executor"):
            parse_executor(bad)
    with (
        pytest.raises(InvalidInput, match="cannot reach the Dask scheduler"),
        open_executor(ExecutorSpec("dask", "nonsense://x")),
    ):
        pass
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["bench", "--scenario", "smoke", "--executor", "spark"]) == 2
    assert "--executor" in err.getvalue()
