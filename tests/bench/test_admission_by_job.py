"""benchmarks/admission_by_job.py: per-job admission and churn from a bench trace."""

from __future__ import annotations

from tests._support.scripts import benchmark

from koi.sim import JobWindow, TickRecord, Trace

ADMISSION_BY_JOB = benchmark("admission_by_job")


def _tick(index: int, *windows: JobWindow) -> TickRecord:
    start = 300.0 * index
    return TickRecord(index, start, start + 300.0, 0.1, 0, 0, 0, 0, (), {}, 0.0, windows)


def test_counts_gpu_changes_and_stalled_windows_per_job() -> None:
    # "hop" is placed, moves twice (the second move stalls its window: 20 of 100 finished)
    # and keeps; "calm" keeps its GPUs and finishes everything.
    hop = [(4, 100, 50), (8, 100, 100), (8, 100, 100), (4, 100, 20), (4, 100, 100)]
    ticks = [
        _tick(
            i,
            JobWindow("hop", offered=o, finished=f, slo_ok=f, gpus=g),
            JobWindow("calm", offered=100, finished=100, slo_ok=100, gpus=2),
        )
        for i, (g, o, f) in enumerate(hop)
    ]
    trace = Trace("s", "koi", 0, 1500.0, ("calm", "hop"), tuple(ticks), (), 1e-6)
    rows = {r["job"]: r for r in ADMISSION_BY_JOB.job_rows(trace)}
    assert (rows["hop"]["gpu_changes"], rows["hop"]["stalled_windows"]) == (2, 1)
    assert (rows["calm"]["gpu_changes"], rows["calm"]["stalled_windows"]) == (0, 0)
    assert rows["hop"]["finished"] == 370 / 500
    runs = [{"dir": "d", "planner": "koi", "seed": 0, **r} for r in rows.values()]
    table = ADMISSION_BY_JOB.table(runs, {("d", "koi", 0): 0.87}, churn=True)
    assert " 74/ 74  2/ 1" in next(line for line in table.splitlines() if line.startswith("hop"))
    assert " 2/ 1" not in ADMISSION_BY_JOB.table(runs, {("d", "koi", 0): 0.87})
