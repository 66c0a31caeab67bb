"""What telemetry that measures less costs koi: TensorRT-LLM's ranks as Prometheus reads them.

    .venv/bin/python benchmarks/telemetry_gaps.py [--scenario hetero-3h] [--seed 0]
        [--gone all|throughput|mediators|none]

koi plans with every engine listed (``proposer.engine_options``); before each tick the
observations of TensorRT-LLM ranks lose what its ``trtllm-serve`` 1.2 does not export
(docs/integrations.md, "TensorRT-LLM"): ``all`` strips throughput, cost and the KV-cache, batch,
queue, preemption and prefix-hit mediators (marked missing, placeholders 0), ``throughput`` only
the first two, ``mediators`` only the rest, ``none`` nothing.  Prints one JSON object: the
composite, online admission, the observations stripped and the ticks that fell back or erred.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import attrs

from koi.config import KoiConfig, with_knobs
from koi.planner import Planner
from koi.sim import load_scenario, run
from koi.types import ClusterSnapshot, Observation, Plan

_THROUGHPUT = ("throughput_tok_s", "cost_per_mtok_usd")
_MEDIATORS = (
    "kv_cache_util",
    "mean_batch_size",
    "queue_depth",
    "preemption_rate",
    "prefix_hit_rate",
)
GONE = {
    "all": _THROUGHPUT + _MEDIATORS,
    "throughput": _THROUGHPUT,
    "mediators": _MEDIATORS,
    "none": (),
}


def stripped(o: Observation, gone: Sequence[str]) -> Observation:
    """``o`` as a source that measures none of ``gone`` reports it."""
    return attrs.evolve(
        o,
        missing=tuple(sorted({*o.missing, *gone})),
        outcomes=attrs.evolve(o.outcomes, **{k: 0.0 for k in gone if k in _THROUGHPUT}),
        mediators=attrs.evolve(o.mediators, **{k: 0.0 for k in gone if k in _MEDIATORS}),
    )


@attrs.define
class _Stripping:
    planner: Planner
    gone: Sequence[str]
    stripped: int = 0
    fallbacks: int = 0
    errors: int = 0

    @property
    def name(self) -> str:
        return self.planner.name

    def decide(self, snapshot: ClusterSnapshot, observations: Sequence[Observation]) -> Plan:
        seen = []
        for o in observations:
            if self.gone and o.chain.config.engine == "trtllm":
                o = stripped(o, self.gone)
                self.stripped += 1
            seen.append(o)
        result = self.planner.tick(snapshot, seen)
        self.fallbacks += bool(result.fallback)
        self.errors += len(result.errors)
        return result.plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="hetero-3h")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gone", choices=sorted(GONE), default="all")
    args = ap.parse_args()
    cfg = with_knobs(KoiConfig(), {"proposer.engine_options": ["vllm", "sglang", "trtllm"]})
    policy = _Stripping(Planner(config=cfg), GONE[args.gone])
    result = run(load_scenario(args.scenario), policy, seed=args.seed)
    m = result.metrics
    out = {
        "scenario": args.scenario,
        "seed": args.seed,
        "gone": args.gone,
        "composite": m.composite,
        "online_admission": m.online_admission,
        "stripped_observations": policy.stripped,
        "fallback_ticks": policy.fallbacks,
        "tick_errors": policy.errors,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
