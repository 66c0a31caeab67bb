"""The chat prompt of the LLM proposer, built only from the job and its ProposalContext."""

from __future__ import annotations

import json
from typing import Any

import attrs

from koi.candidates import ProposalContext, free_gpus
from koi.dag import node_name
from koi.plugins._llm_config import LlmConfig
from koi.plugins._llm_schema import dumps, reply_schema
from koi.types import Job, to_data

__all__ = ["build_messages"]

_SYSTEM = """\
You propose deployments for one LLM serving job on a heterogeneous GPU fleet.
A ladder is a list of ranks; a rank is `replicas` identical copies of the job's model on one
pool (an instance type in one cloud, region and market) under one serving config.
Rules:
- Use only pools listed in `pools`, with the GPU that pool sells, and the job's model.
- Use only the weight precisions (`quant`) listed in the job's `precisions`: the job's owner
  decides which precisions are acceptable for its answers.
- tp*pp GPUs per copy; a copy must fit on one instance unless the pool is `multi_node`.
- Stay within each pool's `free_gpus`, and within the job's budget when one is given.
- Propose at most {max_candidates} ladders, most promising first; prefer ladders that differ
  from the incumbent and address the feedback from the previous round.
- `at_risk` names the outcomes the incumbent is near or past its bound on; `dag_view` says
  which decisions move them (through which runtime mediators) and how confident that is.
Answer with one JSON object and nothing else, matching this JSON Schema exactly (no extra keys):
{schema}"""


def _describe(value: Any, limit: int) -> Any:
    """JSON-ready description of a loosely-typed context field, capped at ``limit`` characters."""
    if value is None:
        return None
    data: Any
    try:
        data = to_data(value) if attrs.has(type(value)) else value
        text = json.dumps(data, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = json.dumps(str(value))
        data = str(value)
    if len(text) <= limit:
        return data
    return text[:limit] + " …(truncated)"


def _pools(context: ProposalContext) -> list[dict[str, Any]]:
    free = free_gpus(context.snapshot)
    out = []
    for pool in sorted(context.snapshot.pools, key=lambda p: p.id):
        env = pool.environment
        out.append(
            {
                "pool": pool.id,
                "gpu": env.gpu,
                "market": env.market.value,
                "gpus_per_instance": env.gpus_per_instance,
                "multi_node": env.multi_node,
                "price_usd_per_gpu_h": round(env.price_usd_per_gpu_h, 4),
                "preemption_per_h": env.preemption_per_h,
                "capacity_gpus": pool.capacity_gpus,
                "free_gpus": max(free[pool.id], 0),
            }
        )
    return out


def _gpus(context: ProposalContext) -> dict[str, Any]:
    names = sorted({p.environment.gpu for p in context.snapshot.pools} & set(context.gpus))
    keep = ("memory_gib", "hbm_tb_s", "bf16_tflops", "fp8_tflops", "int4_tflops", "gpus_per_node")
    return {n: {k: getattr(context.gpus[n], k) for k in keep} for n in names}


def build_messages(
    job: Job, context: ProposalContext, *, max_candidates: int, config: LlmConfig
) -> list[dict[str, str]]:
    """System and user messages for one proposal request (deterministic for equal inputs)."""
    limit = config.max_text_chars
    model = context.models.get(job.model)
    facts = {
        "job": to_data(job),
        "model": to_data(model) if model is not None else None,
        "pools": _pools(context),
        "gpus": _gpus(context),
        "incumbent": to_data(context.incumbent) if context.incumbent is not None else None,
        "at_risk": [node_name(o) for o in context.at_risk],
        "budget": _describe(context.budget, limit),
        "dag_view": _describe(context.dag, limit),
        "mechanisms": [_describe(m, limit) for m in context.mechanisms],
        "feedback": [f[:limit] for f in context.feedback],
        "round": context.round,
        "max_candidates": max_candidates,
    }
    schema = reply_schema(config, quants=job.precisions)
    system = _SYSTEM.format(max_candidates=max_candidates, schema=dumps(schema))
    return [{"role": "system", "content": system}, {"role": "user", "content": dumps(facts)}]
