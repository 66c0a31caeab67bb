"""Where a planner's online admission and deadlines are lost: per job, per seed, from the
traces ``koi bench --out DIR`` writes (``DIR/traces/<planner>-seed<seed>.json``).

Online admission is the mean over online jobs of the share of offered requests finished
(``koi.sim.online_admission``), so one job finishing a tenth of its requests costs the
aggregate as much as ten jobs finishing 91 %.  Per online job this prints that share, the
share finished within both SLO bounds, and the GPU-hours the job held (requests still
running when the run ended count as neither, as the evaluator has them); per batch job whether
it met its deadline and the share of its requests completed by then.  Per job also its churn:
``gpu_changes``, the windows whose GPU count differs from the window before, and
``stalled_windows``, the windows after its first that finished under ``STALLED`` of the
requests offered in them (a new chain loading, a backlog).  JSON (one object per planner, seed
and job) by default, or a table with a column per run (``--churn`` adds the two counts to
each cell)::

    koi bench --scenario hetero-3h --planners koi,feedback-milp --seeds 3 --out runs
    python benchmarks/admission_by_job.py runs [OTHER_DIR ...] [--planners koi] [--table] [--churn]

Several directories compare runs of different code (a column per directory, planner and
seed).  The table's last line is each run's ``online_admission`` as ``koi.sim.evaluate``
computes it from the same trace: the mean of the column's first figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import cattrs

from koi.sim import Trace, evaluate

_TRACE = re.compile(r"^(?P<planner>.+)-seed(?P<seed>\d+)\.json$")
#: A window that finished less than this share of the requests offered in it stalled.
STALLED = 0.3


def _fail(message: str) -> NoReturn:
    print(f"admission_by_job: {message}", file=sys.stderr)
    raise SystemExit(2)


def _share(num: float, den: float) -> float:
    return min(1.0, num / den) if den > 0 else 1.0


def job_rows(trace: Trace) -> Iterator[dict[str, Any]]:
    """One row per job of a run's trace."""
    totals: dict[str, dict[str, float]] = {}
    fields = ("offered", "done", "ok", "gpu_h", "gpu_changes", "stalled_windows")
    gpus: dict[str, int] = {}  # each job's GPUs in its last window
    for tick in trace.ticks:
        hours = (tick.end_s - tick.start_s) / 3600.0
        for w in tick.jobs:
            t = totals.setdefault(w.job_id, dict.fromkeys(fields, 0))
            t["offered"] += w.offered
            t["done"] += w.finished
            t["ok"] += w.slo_ok
            t["gpu_h"] += w.gpus * hours
            if w.job_id in gpus:
                t["gpu_changes"] += w.gpus != gpus[w.job_id]
                t["stalled_windows"] += w.offered > 0 and w.finished < STALLED * w.offered
            gpus[w.job_id] = w.gpus
    for job_id, n in trace.in_flight.items():  # running at the end: neither served nor refused
        if job_id in totals:
            totals[job_id]["offered"] -= n
    for job_id in sorted(trace.online_jobs):
        o = totals.get(job_id)
        if o is None or o["offered"] <= 0:
            continue  # offered nothing: left out of admission, as the evaluator does
        yield {
            "job": job_id,
            "class": "online",
            "finished": _share(o["done"], o["offered"]),
            "within_slo": _share(o["ok"], o["offered"]),
            "gpu_hours": o["gpu_h"],
            **_churn(o),
        }
    for b in trace.batch:
        t = totals.get(b.job_id, {})
        yield {
            "job": b.job_id,
            "class": "batch",
            "met_deadline": b.met_deadline,
            "progress": _share(b.completed_by_deadline, b.requested),
            "gpu_hours": t.get("gpu_h", 0.0),
            **_churn(t),
        }


def _churn(totals: dict[str, float]) -> dict[str, int]:
    return {k: int(totals.get(k, 0)) for k in ("gpu_changes", "stalled_windows")}


def runs(dirs: list[Path], planners: set[str] | None) -> Iterator[tuple[str, str, int, Path]]:
    """(directory label, planner, seed, trace file) of every trace under ``dirs``; the label
    is the directory as given, so two runs' directories with the same name stay apart."""
    for d in dirs:
        traces = d / "traces"
        if not traces.is_dir():
            _fail(f"{d}: no traces/ directory (run koi bench with --out)")
        for path in sorted(traces.glob("*.json")):
            m = _TRACE.match(path.name)
            if m and (planners is None or m["planner"] in planners):
                yield str(d), m["planner"], int(m["seed"]), path


def _cell(row: dict[str, Any] | None, churn: bool) -> str:
    if row is None:
        return "-"
    if row["class"] == "online":
        cell = f"{100 * row['finished']:3.0f}/{100 * row['within_slo']:3.0f}"
    else:
        cell = f"{'met' if row['met_deadline'] else 'late'} {100 * row['progress']:3.0f}"
    return f"{cell} {row['gpu_changes']:2d}/{row['stalled_windows']:2d}" if churn else cell


def table(
    rows: list[dict[str, Any]],
    admission: dict[tuple[str, str, int], float],
    *,
    churn: bool = False,
) -> str:
    """Jobs down, runs across: finished / within-SLO % (online), deadline and progress %
    (batch), with ``churn`` then GPU changes / stalled windows; the last line is each run's
    online admission (``admission``, by run)."""
    cols = sorted({(r["dir"], r["planner"], r["seed"]) for r in rows})
    by = {(r["dir"], r["planner"], r["seed"], r["job"]): r for r in rows}
    jobs = sorted({(r["class"] != "online", r["job"]) for r in rows})
    width = max(15 if churn else 9, *(len(f"{p}:{s}") for _, p, s in cols))
    head = ["job".ljust(18)] + [f"{p}:{s}".rjust(width) for _, p, s in cols]
    lines = [" ".join(head)]
    if len({d for d, _, _ in cols}) > 1:
        lines.append(" ".join(["dir".ljust(18)] + [d[-width:].rjust(width) for d, _, _ in cols]))
    for _, job in jobs:
        cells = [_cell(by.get((d, p, s, job)), churn) for d, p, s in cols]
        lines.append(" ".join([job[:18].ljust(18)] + [c.rjust(width) for c in cells]))
    adm = [f"{100 * admission[c]:.1f}" for c in cols]
    lines.append(" ".join(["online admission".ljust(18)] + [a.rjust(width) for a in adm]))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="koi bench --out directories")
    ap.add_argument("--planners", help="comma-separated planners (default: every trace)")
    ap.add_argument("--table", action="store_true", help="a text table instead of JSON")
    ap.add_argument(
        "--churn", action="store_true", help="GPU changes / stalled windows in the table"
    )
    args = ap.parse_args()
    wanted = set(args.planners.split(",")) if args.planners else None
    rows: list[dict[str, Any]] = []
    admission: dict[tuple[str, str, int], float] = {}
    for label, planner, seed, path in runs(args.dirs, wanted):
        try:
            trace = cattrs.structure(json.loads(path.read_text())["trace"], Trace)
        except Exception as e:  # any unreadable file: name it, no traceback
            _fail(f"{path}: not a koi bench trace ({type(e).__name__}: {e})")
        admission[(label, planner, seed)] = evaluate(trace).online_admission
        rows.extend({"dir": label, "planner": planner, "seed": seed, **r} for r in job_rows(trace))
    if not rows:
        _fail("no traces matched")
    print(table(rows, admission, churn=args.churn) if args.table else json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
