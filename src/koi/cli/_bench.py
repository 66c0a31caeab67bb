"""``koi bench``: run the planners on a scenario and print the paper-like table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from koi.errors import InvalidInput

__all__ = ["add_executor_arguments", "register"]


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    """``--jobs`` and ``--executor``, shared by ``koi bench`` and ``koi sweep``."""
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes, or a LocalCluster's workers (default: CPUs)",
    )
    p.add_argument(
        "--executor",
        default="process",
        metavar="process|dask[=ADDRESS]",
        help=(
            "where runs execute: a local process pool (default), a Dask LocalCluster "
            "('dask'), or a running Dask scheduler ('dask=tcp://HOST:PORT'); needs koi[dask]"
        ),
    )


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="compare koi with the baselines on a simulated fleet",
        description=(
            "Run planners (default: every non-LLM planner and the two truth-fed references) "
            "on a simulated-fleet scenario over several seeds, in parallel processes "
            "or on a Dask cluster (--executor dask); "
            "print the table (mean ± spread over seeds), write results.json, per-planner "
            "traces and, with matplotlib installed, PNG plots and report.md to --out."
        ),
    )
    p.add_argument("--scenario", default="hetero-3h", help="built-in name or TOML path")
    p.add_argument(
        "--planners", default=None, help="comma-separated planner names (default: all non-LLM)"
    )
    p.add_argument("--seeds", type=int, default=3, help="N seeds per planner (default 3)")
    p.add_argument(
        "--seed-start",
        type=int,
        default=0,
        help=(
            "first seed (default 0): seeds K..K+N-1; 0-2 are the development seeds, "
            "3 and up are held out"
        ),
    )
    p.add_argument("--out", default="bench-out", help="output directory (default bench-out/)")
    p.add_argument(
        "--replay-requests",
        type=_replay_requests,
        default=None,
        metavar="N|all",
        help=(
            "requests of a job's 5-minute window the world replays one by one before it "
            "samples a sub-window (default 250); 'all' replays every request: more faithful "
            "queues, about 25 times the world's CPU on hetero-3h"
        ),
    )
    add_executor_arguments(p)
    p.add_argument("--json", action="store_true", help="print results.json to stdout")
    p.add_argument("--verbose", action="store_true", help="one progress line per tick per run")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(handler=_run)


def _replay_requests(text: str) -> int:
    from koi.bench import replay_requests_of

    try:
        return replay_requests_of(int(text) if text.lstrip("-").isdigit() else text)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    from koi.baselines import DEFAULT_PLANNERS
    from koi.bench import (
        EVERY_REQUEST,
        claims,
        format_claims,
        format_table,
        parse_executor,
        run_bench,
        write_report,
    )

    planners = (
        list(DEFAULT_PLANNERS)
        if args.planners is None
        else [p.strip() for p in args.planners.split(",") if p.strip()]
    )
    executor = parse_executor(args.executor)
    out = Path(args.out)
    result = run_bench(
        args.scenario,
        planners,
        seeds=args.seeds,
        seed_start=args.seed_start,
        jobs=args.jobs,
        executor=executor,
        out_dir=out,
        progress=sys.stderr,
        verbose=args.verbose,
        replay_requests=args.replay_requests,
    )
    data = result.to_dict()
    data["command"] = (
        f"koi bench --scenario {args.scenario} --seeds {args.seeds} "
        f"--seed-start {args.seed_start} --planners {','.join(planners)}"
    )
    if args.replay_requests is not None:
        shown = "all" if args.replay_requests == EVERY_REQUEST else args.replay_requests
        data["command"] += f" --replay-requests {shown}"
    rows = claims(result.summary)
    data["claims"] = [c.to_dict() for c in rows]
    (out / "results.json").write_text(json.dumps(data, indent=2))
    if not args.no_plots:
        write_report(result, out)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_table(result.summary))
        if rows:
            print(format_claims(rows))
        print(f"results: {out / 'results.json'}  (wall {result.wall_s:.0f} s)")
    return 0
