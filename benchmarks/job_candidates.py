"""Why koi gave a job the ladder it did: the job's candidates, tick by tick, over a stretch of
a simulated run.

    .venv/bin/python benchmarks/job_candidates.py --scenario homo-12h --seed 4 --job summ-70b
        --from 215 --to 230 [--knob planner.spread_best_effort=true ...] [--json]

koi runs as ``koi bench`` runs it (no wall-clock limits, the same seed); from minute
``--from`` on, each tick prints the job's verdict if it is at risk and every candidate it was
given, best value first: ``*`` the chosen one, its kind and key, GPUs, value (``J - γ p -
λ Switch``), Tchebycheff score ``J``, breach probability, switching cost, sources, predicted
p99 TTFT / p99 TPOT / throughput, why it was rejected and its ranks (replicas × GPU type,
TP, precision, batch cap, pool).  The run stops after minute
``--to``.  ``--corrections`` adds, per rank, the residual corrections the prediction started
from (:meth:`Planner.corrections_in_force`: prefill and decode step, p99 TTFT and TPOT
factors), so a candidate predicted far from the prior says where the factor comes from.
``--json`` prints one JSON object per tick instead.  docs/benchmark.md's trace of a
hopeless service shrunk for a ladder that carries less was read this way.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import attrs

from koi.baselines import koi_config
from koi.catalog import load_catalog
from koi.collector import relaxed_collector
from koi.config import KoiConfig, with_knobs
from koi.errors import KoiError
from koi.planner import CandidateReport, Planner, TickResult
from koi.sim import load_scenario, run
from koi.surrogate import RankCorrection
from koi.types import Chain, ClusterSnapshot, Config, Observation, Plan, Rank
from tick import knob


class _Done(Exception):
    """The stretch asked for is printed: end the run."""


def _row(
    c: CandidateReport, corrections: Callable[[Chain], RankCorrection] | None
) -> dict[str, Any]:
    o = c.outcomes
    return {
        "corrections": None
        if corrections is None
        else [corrections(r.chain).factors() for r in c.ladder.ranks],
        "chosen": c.chosen,
        "kind": c.kind.value,
        "key": c.key,
        "gpus": c.ladder.gpus,
        "value": c.value,
        "tchebycheff": c.tchebycheff,
        "breach_probability": c.breach_probability,
        "switch_usd": c.switch_usd,
        "sources": list(c.sources),
        "p99_ttft_ms": None if o is None else o.p99_ttft_ms,
        "p99_tpot_ms": None if o is None else o.p99_tpot_ms,
        "throughput_tok_s": None if o is None else o.throughput_tok_s,
        "rejected": c.rejected,
        "ladder": [_rank(r) for r in c.ladder.ranks],
    }


#: The engine settings a rank's label leaves out when it keeps them.
_DEFAULTS = Config()


def _rank(r: Rank) -> str:
    """One rank as ``4×H100-SXM tp8 fp8 b64`` (then what differs from the defaults: pipeline
    stages, engine, KV-cache type, routing, token budget), the pool after ``@``."""
    cf = r.chain.config
    extra = []
    for name in ("pp", "engine", "kv_cache_dtype", "routing", "max_batched_tokens"):
        value = getattr(cf, name)
        if value != getattr(_DEFAULTS, name):
            extra.append(f"{name}={getattr(value, 'value', value)}")
    head = f"{r.replicas}×{r.chain.environment.gpu} tp{cf.tp} {cf.quant.value} b{cf.max_batch_size}"
    return " ".join([head, *extra, f"@{r.chain.environment.id}"])


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _corrected(factors: list[dict[str, float]] | None) -> str:
    """Each rank's factors as ``p×1.00 d×3.13 ttft×1.55 tpot×1.00``, ranks joined by ``/``."""
    if not factors:
        return ""
    short = {"prefill_time": "p", "decode_time": "d", "p99_ttft_ms": "ttft", "p99_tpot_ms": "tpot"}
    return " corr=" + "/".join(
        " ".join(f"{short[k]}×{v:.2f}" for k, v in f.items()) for f in factors
    )


def _print(
    minute: float,
    job: str,
    result: TickResult,
    as_json: bool,
    corrections: Callable[[Chain], RankCorrection] | None,
) -> None:
    risk = next((r for r in result.at_risk if r.job_id == job), None)
    rows = [_row(c, corrections) for c in result.candidates_for(job)]
    if as_json:
        verdict = None if risk is None else {"verdict": risk.verdict.value, "detail": risk.detail}
        print(json.dumps({"minute": minute, "job": job, "at_risk": verdict, "candidates": rows}))
        return
    head = f"minute {minute:g}"
    print(head if risk is None else f"{head}  at risk: {risk.verdict.value} ({risk.detail})")
    for r in rows:
        print(
            f"  {'*' if r['chosen'] else ' '} {r['kind']:11s} {r['key']:12s} "
            f"gpus={r['gpus']:<4d} value={r['value']:9.3f} J={r['tchebycheff']:9.3f} "
            f"p={r['breach_probability']:.2f} switch={r['switch_usd']:7.1f} "
            f"ttft={_num(r['p99_ttft_ms'], '.0f')} tpot={_num(r['p99_tpot_ms'], '.0f')} "
            f"tput={_num(r['throughput_tok_s'], '.0f')} {','.join(r['sources'])} {r['rejected']}"
            f" [{' + '.join(r['ladder'])}]{_corrected(r['corrections'])}"
        )


@attrs.define
class _Watching:
    """koi's planner as a policy, printing one job's candidates over ``[start, end]`` minutes."""

    planner: Planner
    job: str
    start: float
    end: float
    as_json: bool
    corrections: bool

    @property
    def name(self) -> str:
        return self.planner.name

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        minute = snapshot.time_s / 60.0
        if minute > self.end:
            raise _Done
        result = self.planner.tick(snapshot, observations)
        if minute >= self.start:
            # None before the job arrives and after it leaves
            job = next((j for j in snapshot.jobs if j.id == self.job), None)
            job = job if self.corrections else None
            _print(
                minute,
                self.job,
                result,
                self.as_json,
                None if job is None else partial(self.planner.corrections_in_force, job),
            )
        return result.plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--job", required=True)
    ap.add_argument("--from", dest="start", type=float, default=0.0, help="first minute")
    ap.add_argument("--to", dest="end", type=float, default=float("inf"), help="last minute")
    ap.add_argument("--knob", action="append", default=[], help="PATH=VALUE (JSON value)")
    ap.add_argument("--json", action="store_true", help="one JSON object per tick")
    ap.add_argument("--corrections", action="store_true", help="each rank's corrections in force")
    args = ap.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
        if args.job not in {j.id for j in scenario.jobs}:
            raise KoiError(f"--job: no job {args.job!r} in scenario {scenario.name!r}")
        config = with_knobs(KoiConfig(), dict(knob(k, "--knob") for k in args.knob))
        planner = Planner(config=koi_config("koi", config), catalog=load_catalog(), name="koi")
        policy = _Watching(planner, args.job, args.start, args.end, args.json, args.corrections)
        with relaxed_collector():  # as koi bench runs it
            run(scenario, policy, seed=args.seed)
    except _Done:
        pass
    except KoiError as e:
        print(f"job_candidates: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
