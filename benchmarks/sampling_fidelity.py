"""How far the sampled world is from replaying every request, on the same decisions.

    python benchmarks/sampling_fidelity.py --scenario hetero-3h --seed 6 --planner fcfs \
        [--live | --sampled-only]

The world replays each job's window on a sub-window of at most ``max_requests_per_window``
requests, each standing for ``scale`` real ones (docs/evaluation.md, "Sampled windows").
This script runs ``--planner`` on that world and records its plans, then replays exactly
those plans on a world that replays every request (or up to ``--full-requests`` a window).
Prints JSON: the run's metrics on both worlds and their difference, the CPU each world took,
and per online job the share of its requests finished and finished within both SLO bounds
(requests running at the end left out, as the evaluator does), the completions its telemetry
reported per routed request (what every planner reads) and the windows in which a rank
reported more completions than requests.  The recorded plans are replayed on the sampled
world too, as a check that the replay reproduces the run (``replay_exact``).
``--sampled-only`` stops after the sampled run: the telemetry against the accounting, at the
sampled world's cost.

``--live`` also runs the planner itself on the full world: its decisions then follow telemetry
without sampling, so the difference from the recorded run is what the sampling did to the
planner's choices as well as to their outcomes.  References (``koi-truth``, ``milp-truth``)
are given a world of their own sampling to read the truth from, as ``koi bench`` does.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import attrs

from koi.baselines import REFERENCE, make_policy
from koi.bench import EVERY_REQUEST, world_config
from koi.catalog import load_catalog
from koi.sim import Policy, RunResult, SimConfig, build_world, run
from koi.types import ClusterSnapshot, Observation, Plan

_METRICS = (
    "online_admission",
    "ttft_attainment",
    "tpot_attainment",
    "batch_progress",
    "deadline_attainment",
    "goodput_tok_s",
    "cost_per_slo_token_usd",
    "composite",
)


@attrs.define
class _Recorded:
    """``inner`` unchanged, with its plans kept and the telemetry it is shown summed per job."""

    inner: Policy
    plans: list[Plan] = attrs.field(factory=list)
    requests: Counter[str] = attrs.field(factory=Counter)
    completed: Counter[str] = attrs.field(factory=Counter)
    over: Counter[str] = attrs.field(factory=Counter)

    @property
    def name(self) -> str:
        return self.inner.name

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        for o in observations:
            self.requests[o.job_id] += o.requests
            self.completed[o.job_id] += o.completed
            self.over[o.job_id] += int(o.completed > o.requests)
        plan = self.inner.decide(snapshot, observations)
        self.plans.append(plan)
        return plan


@attrs.define
class _Replayed:
    """The plans of a recorded run, tick by tick, whatever the world shows."""

    plans: Sequence[Plan]
    name: str = "replayed"
    tick: int = 0

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        del snapshot, observations
        plan = self.plans[self.tick]
        self.tick += 1
        return plan


def _summary(result: RunResult, policy: _Recorded, cpu_s: float) -> dict[str, Any]:
    offered: defaultdict[str, float] = defaultdict(float)
    finished: defaultdict[str, float] = defaultdict(float)
    met: defaultdict[str, float] = defaultdict(float)
    for tick in result.trace.ticks:
        for w in tick.jobs:
            offered[w.job_id] += w.offered
            finished[w.job_id] += w.finished
            met[w.job_id] += w.slo_ok
    jobs = {}
    for j in sorted(result.trace.online_jobs):
        # Requests still running at the end are neither finished nor failed (as the evaluator).
        n = offered[j] - result.trace.in_flight.get(j, 0.0)
        if n <= 0 or policy.requests[j] <= 0:
            continue
        jobs[j] = {
            "finished": round(finished[j] / n, 3),
            "slo_met": round(met[j] / n, 3),
            "telemetry_completed_per_request": round(policy.completed[j] / policy.requests[j], 3),
            "windows_over": policy.over[j],
        }
    metrics = {m: float(f"{getattr(result.metrics, m):.5g}") for m in _METRICS}
    return {"cpu_s": round(cpu_s, 1), "metrics": metrics, "jobs": jobs}


def _run(scenario: str, policy: Policy, seed: int, cfg: SimConfig) -> dict[str, Any]:
    recorded = policy if isinstance(policy, _Recorded) else _Recorded(policy)
    t = time.process_time()
    result = run(scenario, recorded, seed=seed, cfg=cfg)
    return _summary(result, recorded, time.process_time() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--planner", default="fcfs")
    ap.add_argument("--full-requests", type=int, default=EVERY_REQUEST)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--live", action="store_true", help="also run the planner on the full world")
    mode.add_argument("--sampled-only", action="store_true", help="only the sampled world's run")
    args = ap.parse_args()
    sampled, full = world_config(None), world_config(args.full_requests)

    def planner(cfg: SimConfig) -> Policy:
        # Only the references see the truth, as in ``koi bench``.
        reference = args.planner in REFERENCE
        world = build_world(args.scenario, seed=args.seed, cfg=cfg) if reference else None
        return make_policy(args.planner, catalog=load_catalog(), seed=args.seed, world=world)

    recorded = _Recorded(planner(sampled))
    out: dict[str, Any] = {"scenario": args.scenario, "seed": args.seed, "planner": args.planner}
    out["sampled"] = _run(args.scenario, recorded, args.seed, sampled)
    if args.sampled_only:
        print(json.dumps(out, indent=2))
        return
    again = _run(args.scenario, _Replayed(recorded.plans), args.seed, sampled)
    out["replay_exact"] = again["metrics"] == out["sampled"]["metrics"]
    out["full"] = _run(args.scenario, _Replayed(recorded.plans), args.seed, full)
    out["full_minus_sampled"] = {
        m: float(f"{out['full']['metrics'][m] - out['sampled']['metrics'][m]:.4g}")
        for m in _METRICS
    }
    if args.live:
        out["live_full"] = _run(args.scenario, planner(full), args.seed, full)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
