"""``koi agent --config koi.toml``: the production control loop."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import attrs

from koi.collector import relaxed_collector
from koi.errors import InvalidInput

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent",
        help="run the planning loop over the plugins a config file names",
        description=(
            "Every tick_s: snapshot, telemetry, plan, launch, checkpoint. Logs JSON lines on "
            "stderr and serves /metrics, /healthz and /status on 127.0.0.1. SIGTERM or "
            "Ctrl-C stops after the current tick; a second one abandons it."
        ),
    )
    p.add_argument("--config", type=Path, required=True, metavar="KOI.toml")
    p.add_argument(
        "--dry-run", action="store_true", help="advisory mode: plan and log, launch nothing"
    )
    p.add_argument("--port", type=int, default=None, help="override agent.port (0: any free)")
    p.add_argument("--max-ticks", type=int, default=None, help="stop after N ticks")
    p.add_argument("--tick-s", type=float, default=None, help="override agent.tick_s")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from koi.agent import Agent, load_config

    cfg = load_config(args.config)
    changes: dict[str, Any] = {}
    if args.dry_run:
        changes["dry_run"] = True
    if args.port is not None:
        if not 0 <= args.port <= 65535:
            raise InvalidInput(f"--port: must be in [0, 65535], got {args.port}")
        changes["port"] = args.port
    if args.max_ticks is not None:
        if args.max_ticks < 0:
            raise InvalidInput(f"--max-ticks: must be >= 0, got {args.max_ticks}")
        changes["max_ticks"] = args.max_ticks
    if args.tick_s is not None:
        if not args.tick_s > 0:
            raise InvalidInput(f"--tick-s: must be > 0, got {args.tick_s}")
        changes["tick_s"] = args.tick_s
    agent = Agent(attrs.evolve(cfg, **changes))
    agent.install_signal_handlers()
    with relaxed_collector():  # the loop is this process's own (koi.collector)
        return agent.run()
