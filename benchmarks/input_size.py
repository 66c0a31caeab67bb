"""Input size (issue 13, item 11): ``koi predict --replicas 1000000`` and a 10,000-job snapshot.

Prints JSON with the median seconds of each over ``--repeats`` runs, next to a reference
measured in the same run: ``koi predict`` of one replica (replayed) and a tick of a one-job
snapshot.  A million replicas are answered by the closed form; 10,000 jobs are refused at S0
(``PlannerConfig.max_jobs``)::

    .venv/bin/python benchmarks/input_size.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import time
from collections.abc import Callable

import attrs

from koi.catalog import load_catalog
from koi.cli import main as koi
from koi.errors import InvalidInput
from koi.planner import Planner
from koi.types import ClusterSnapshot, Job, LengthDist, Pool, ServingTarget, WorkloadProfile

PREDICT = "predict --model Llama-3.1-8B --gpu H100-SXM --tp 1 --isl 1000 --osl 200 --json"


def _median_s(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 4)


def _predict(replicas: int, rate: float) -> None:
    argv = [*PREDICT.split(), "--replicas", str(replicas), "--rate", str(rate)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert koi(argv) == 0


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    catalog = load_catalog()
    env = next(e for e in catalog.environments() if e.gpu == "L40S")
    pools = [Pool(env, 4)]
    job = Job(
        "chat",
        "Llama-3.1-8B",
        "online",
        WorkloadProfile(LengthDist(1000, 0.3, 4000), LengthDist(200, 0.3, 800), rate_rps=2.0),
        ServingTarget.online(p99_ttft_ms=2000.0, p99_tpot_ms=80.0),
    )
    many = ClusterSnapshot(0.0, [attrs.evolve(job, id=f"j{k}") for k in range(10_000)], pools)
    one = ClusterSnapshot(0.0, [job], pools)

    def refuse() -> None:
        try:
            Planner(catalog=catalog).tick(many)
        except InvalidInput:
            return
        raise AssertionError("10,000 jobs were not refused")

    out = {
        "predict_1_replica_s": _median_s(lambda: _predict(1, 5.0), args.repeats),
        "predict_1000000_replicas_s": _median_s(lambda: _predict(1_000_000, 5_000.0), args.repeats),
        "tick_1_job_s": _median_s(lambda: Planner(catalog=catalog).tick(one), args.repeats),
        "refuse_10000_jobs_s": _median_s(refuse, args.repeats),
        "repeats": args.repeats,
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
