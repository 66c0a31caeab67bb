"""``koi sweep SWEEP.toml``: a grid of scenarios, planners, seeds and KoiConfig knobs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from koi.cli._bench import add_executor_arguments

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sweep",
        help="run a grid of scenarios x planners x seeds x KoiConfig knobs",
        description=(
            "Run every cell of a sweep file (scenarios, planners, seeds and KoiConfig knob "
            "values; see docs/benchmark.md) on a local process pool or a Dask cluster. Each "
            "finished run is appended to OUT/runs.jsonl as one JSON line; at the end, one "
            "table per scenario (a row per planner and knob setting, mean ± spread over seeds) "
            "is printed and OUT/summary.json written."
        ),
    )
    p.add_argument("sweep", help="the sweep TOML file")
    p.add_argument("--out", default="sweep-out", help="output directory (default sweep-out/)")
    add_executor_arguments(p)
    p.add_argument(
        "--jsonl", action="store_true", help="print the JSON lines to stdout instead of tables"
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from koi.bench import format_table, load_sweep, parse_executor, run_sweep, sweep_line

    sweep = load_sweep(args.sweep)
    executor = parse_executor(args.executor)
    out = Path(args.out)
    cells = len(sweep.cells())
    lines_path = out / "runs.jsonl"
    finished = 0
    with ExitStack() as stack:
        lines: list[TextIO] = []  # runs.jsonl, opened by started()

        def started() -> None:  # every input checked: the output can be written
            out.mkdir(parents=True, exist_ok=True)
            lines.append(stack.enter_context(lines_path.open("w", encoding="utf-8")))
            print(
                f"koi sweep: {args.sweep}, {cells} run(s) on {executor}",
                file=sys.stderr,
                flush=True,
            )

        def on_run(record: Mapping[str, Any]) -> None:
            nonlocal finished
            finished += 1
            line = json.dumps(sweep_line(record))
            lines[0].write(line + "\n")
            lines[0].flush()
            if args.jsonl:
                print(line, flush=True)
            m = record["metrics"]
            print(
                f"[sweep {finished}/{cells}] {record['scenario']} {record['label']} "
                f"seed={record['seed']} composite={m['composite']:.1f} "
                f"wall={record['wall_s']:.1f}s",
                file=sys.stderr,
                flush=True,
            )

        result = run_sweep(sweep, executor=executor, jobs=args.jobs, on_run=on_run, started=started)
    summary = {
        "sweep": args.sweep,
        "replay_requests": sweep.replay_requests,
        "wall_s": result.wall_s,
        "scenarios": result.summaries,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if not args.jsonl:
        for name, table in result.summaries.items():
            print(f"== {name}")
            print(format_table(table))
        print(f"runs: {lines_path}  (wall {result.wall_s:.0f} s)")
    return 0
