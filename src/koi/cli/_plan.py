"""``koi plan SNAPSHOT.json``: an advisory plan for one snapshot, with the reasons."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from koi.errors import StateError, read_text
from koi.types import ClusterSnapshot, Job, Ladder, Quant, from_json, to_data

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="advisory plan for a cluster snapshot",
        description=(
            "Plan one tick for the snapshot in SNAPSHOT.json (the JSON form of "
            "koi.types.ClusterSnapshot) and explain every decision. Nothing is launched."
        ),
    )
    p.add_argument("snapshot", type=Path, metavar="SNAPSHOT.json")
    p.add_argument("--state", type=Path, default=None, help="planner checkpoint to resume")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler=_run)


def _policy_text(job: Job) -> str:
    """The job's precision policy in one line: what it accepts and what that rules out."""
    accepted = ", ".join(q.value for q in job.precisions)
    refused = [q.value for q in Quant if q not in job.precisions]
    if not refused:
        return f"precisions: {accepted} (every precision accepted)"
    return f"precisions: {accepted} (job policy: {', '.join(refused)} ladders are infeasible, C2)"


def _routing(planner: Any, job: Any, ladder: Ladder, now_s: float) -> dict[str, Any] | None:
    """Why the job's routing: its shared prefixes and the hit rate and TTFT each routing gives
    its ladder (the surrogate's prediction, without the planner's corrections)."""
    from koi.candidates import routing_matters, with_routing
    from koi.types import Routing

    if ladder.is_empty or not routing_matters(job) or ladder.replicas < 2:
        return None
    w = job.workload
    chosen = next((r.chain.config.routing for r in ladder.ranks if r.replicas > 1), None)
    options = {}
    for routing in (Routing.PREFIX_AFFINITY, Routing.LEAST_LOADED, Routing.ROUND_ROBIN):
        pred = planner.surrogate.predict(job, with_routing(ladder, routing), now_s=now_s)
        if pred.feasible:
            options[routing.value] = {
                "prefix_hit_rate": pred.mediators.prefix_hit_rate,
                "p99_ttft_ms": pred.outcomes.p99_ttft_ms,
                "throughput_tok_s": pred.outcomes.throughput_tok_s,
            }
    return {
        "routing": None if chosen is None else chosen.value,
        "prefixes": w.prefix_count,
        "prefix_tokens": w.shared_prefix_tokens,
        "options": options,
    }


def _run(args: argparse.Namespace) -> int:
    from koi.planner import Planner

    text = read_text(args.snapshot)
    snapshot = from_json(text, ClusterSnapshot, where=str(args.snapshot))
    planner = Planner(state_path=args.state)
    result = planner.tick(snapshot)
    if not result.committed:  # --state asked for the learning to persist, and it did not
        failed = [e for e in result.errors if e.startswith("checkpoint")]
        raise StateError(failed[0] if failed else f"{args.state}: the checkpoint was not written")
    at_risk = {r.job_id: r for r in result.at_risk}
    explained = []
    for action in result.plan.actions:
        candidates = result.candidates_for(action.job_id)
        chosen = next((c for c in candidates if c.chosen), None)
        runner_up = next((c for c in candidates if not c.chosen and not c.rejected), None)
        # Policy rejections first: they say why a ladder the user may expect is not taken.
        rejected = sorted(
            (c for c in candidates if c.rejected),
            key=lambda c: "precision policy" not in c.rejected,
        )
        spec = snapshot.job(action.job_id)
        explained.append(
            {
                "job_id": action.job_id,
                "action": action.kind.value,
                "precisions": [q.value for q in spec.precisions],
                "policy": _policy_text(spec),
                "ladder": to_data(action.ladder),
                "ladder_text": action.ladder.summary(),
                "predicted": to_data(chosen.outcomes) if chosen and chosen.outcomes else None,
                "value": chosen.value if chosen else None,
                "breach_probability": chosen.breach_probability if chosen else None,
                "runner_up": None
                if runner_up is None
                else {
                    "ladder_text": runner_up.ladder.summary(),
                    "value": runner_up.value,
                    "lost_by": (chosen.value - runner_up.value) if chosen else None,
                },
                "rejected": [
                    {"ladder_text": c.ladder.summary(), "why": c.rejected} for c in rejected[:5]
                ],
                "reason": action.reason,
                "routing": _routing(
                    planner, snapshot.job(action.job_id), action.ladder, snapshot.time_s
                ),
                "corrections": [
                    planner.corrections_in_force(spec, r.chain).factors()
                    for r in action.ladder.ranks
                ],
                "at_risk": None
                if action.job_id not in at_risk
                else {
                    "verdict": at_risk[action.job_id].verdict.value,
                    "detail": at_risk[action.job_id].detail,
                    "breach_probability": at_risk[action.job_id].breach_probability,
                },
            }
        )
    out = {
        "time_s": snapshot.time_s,
        "selector": result.selector_status,
        "gap": result.gap,
        "binding": list(result.binding),
        "knobs": dict(result.knobs),
        "errors": list(result.errors),
        "at_risk": sorted(at_risk),
        "jobs": explained,
    }
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(
        f"plan at t={snapshot.time_s:.0f}s  selector={result.selector_status}  gap={result.gap:.4f}"
    )
    if result.binding:
        print(f"binding constraints: {', '.join(result.binding)}")
    if at_risk:
        print(f"at risk: {', '.join(sorted(at_risk))}")
    for job in explained:
        print(f"\n{job['job_id']}: {job['action']}  {job['ladder_text']}")
        print(f"  {job['policy']}")
        if job["at_risk"]:
            risk = job["at_risk"]
            print(f"  AT RISK ({risk['verdict']}): {risk['detail']}")
        if job["predicted"]:
            p = job["predicted"]
            print(
                f"  predicted: TTFT p99 {p['p99_ttft_ms']:.0f} ms, "
                f"TPOT p99 {p['p99_tpot_ms']:.1f} ms, "
                f"{p['throughput_tok_s']:.0f} tok/s, ${p['cost_per_mtok_usd']:.3f}/Mtok, "
                f"breach p {job['breach_probability']:.2f}"
            )
        for k, factors in enumerate(job["corrections"]):
            moved = {n: f for n, f in factors.items() if f != 1.0}
            if moved:
                print(
                    f"  learned (rank {k + 1}, against the prior): "
                    + ", ".join(f"{n} ×{f:.2f}" for n, f in moved.items())
                )
        ru = job["runner_up"]
        if ru:
            print(f"  runner-up: {ru['ladder_text']} (lost by {ru['lost_by']:.3f} score)")
        for rej in job["rejected"][:2]:
            print(f"  rejected: {rej['ladder_text']}: {rej['why']}")
        rt = job["routing"]
        if rt:
            print(
                f"  routing: {rt['routing']} ({rt['prefixes']} shared prefixes of "
                f"{rt['prefix_tokens']} tokens; predicted prefix-cache hits / TTFT p99 by routing: "
                + ", ".join(
                    f"{name} {o['prefix_hit_rate']:.0%} / {o['p99_ttft_ms']:.0f} ms"
                    for name, o in rt["options"].items()
                )
                + ")"
            )
        print(f"  reason: {job['reason']}")
    for e in result.errors:
        print(f"warning: {e}")
    return 0
