"""``koi predict``: latency, throughput, memory and mediators of one deployment under one load."""

from __future__ import annotations

import argparse
import enum
import json
import math
import sys
from typing import Any

import attrs

from koi.errors import InvalidInput

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "predict",
        help="predict TTFT, TPOT, throughput and mediators of one deployment",
        description=(
            "Predict one deployment (replicas x tp x pp GPUs) serving fixed-length requests at "
            "an open-loop rate or a closed-loop concurrency.  Prices come from the cheapest "
            "catalog instance selling the GPU unless --price-per-gpu-h is given."
        ),
    )
    p.add_argument("--model", required=True, help="catalog model name, e.g. Llama-3.1-8B")
    p.add_argument("--gpu", required=True, help="catalog GPU name, e.g. H100-SXM")
    p.add_argument("--tp", type=int, required=True, help="tensor parallel degree")
    p.add_argument("--pp", type=int, default=1, help="pipeline parallel degree (default 1)")
    p.add_argument("--quant", choices=["bf16", "fp8", "int4"], default="bf16")
    p.add_argument(
        "--precisions",
        default=None,
        metavar="LIST",
        help="the job's accepted precisions, e.g. bf16,fp8: also print the policy verdict (C2)",
    )
    p.add_argument("--engine", default="vllm", help="serving engine (vllm, sglang, trtllm)")
    p.add_argument("--max-batch", type=int, default=256, help="max running sequences")
    p.add_argument("--max-batched-tokens", type=int, default=8192, help="tokens per iteration")
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="share of device memory the engine may use (default 0.9, vLLM's)",
    )
    p.add_argument(
        "--eager", action="store_true", help="eager mode: no CUDA graphs (vLLM --enforce-eager)"
    )
    p.add_argument("--no-chunked-prefill", action="store_true", help="prompts are prefilled whole")
    p.add_argument(
        "--max-model-len", type=int, default=None, help="longest request the engine accepts"
    )
    p.add_argument("--kv-cache-dtype", default="auto", help="KV cache dtype: auto (BF16) or fp8")
    p.add_argument(
        "--instance",
        default=None,
        help="catalog instance type CLOUD/NAME: its interconnect (e.g. aws/g6e.48xlarge)",
    )
    p.add_argument(
        "--interconnect",
        default=None,
        help="GPU interconnect: nvlink, pcie (peer-to-peer), pcie_no_p2p, infinity_fabric",
    )
    p.add_argument("--pcie-gen", type=int, default=None, help="PCIe generation (3-6)")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--isl", type=int, required=True, help="input tokens per request")
    p.add_argument("--osl", type=int, required=True, help="output tokens per request")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="requests per second (open loop, Poisson)")
    load.add_argument("--concurrency", type=int, help="requests in flight (closed loop)")
    p.add_argument(
        "--protocol",
        default=None,
        help=(
            "load generator's protocol: inferencemax, genai-perf-count, genai-perf-steady "
            "(closed loop; docs/surrogate.md §7) or poisson (open loop); default: closed loop "
            "with the clients starting together, 10 x concurrency requests, fixed lengths"
        ),
    )
    p.add_argument(
        "--requests", type=int, default=None, help="requests in a closed-loop run (10 x C)"
    )
    p.add_argument(
        "--length-spread",
        type=float,
        default=None,
        help="lengths uniform within +-this fraction of --isl/--osl (default 0: fixed)",
    )
    p.add_argument(
        "--steady-state",
        action="store_true",
        help="closed loop measured after a warm-up, without the clients' initial burst",
    )
    p.add_argument("--price-per-gpu-h", type=float, default=None, help="USD per GPU-hour")
    p.add_argument("--analytic", action="store_true", help="closed form only, no replay")
    p.add_argument(
        "--backend",
        choices=["builtin", "aic"],
        default="builtin",
        help="step times: built-in operator model, or aiconfigurator-core data (extra 'aic')",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=_run)


def _price(catalog: Any, gpu: str, given: float | None) -> float | None:
    if given is not None:
        return given
    try:
        price: float = catalog.cheapest_usd_per_gpu_h(gpu, markets=["on_demand"])
    except InvalidInput:
        return None
    return price


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None  # JSON has no infinity
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    return x


ENGINES = ("vllm", "sglang", "trtllm")
PROTOCOL_PRESETS = ("poisson", "inferencemax", "genai-perf-count", "genai-perf-steady")
_LINKS = ("nvlink", "pcie", "pcie_no_p2p", "infinity_fabric")


def _bad_input(args: argparse.Namespace) -> str | None:
    """The first invalid flag, as ``--flag: rule, got value``; None when all are valid."""
    from koi.surrogate import MAX_CONCURRENCY, MAX_REQUESTS

    positive = (
        ("--tp", args.tp),
        ("--pp", args.pp),
        ("--max-batch", args.max_batch),
        ("--max-batched-tokens", args.max_batched_tokens),
        ("--replicas", args.replicas),
        ("--isl", args.isl),
        ("--osl", args.osl),
        ("--concurrency", args.concurrency),
        ("--max-model-len", args.max_model_len),
    )
    for flag, value in positive:
        if value is not None and value < 1:
            return f"{flag}: must be an integer >= 1, got {value}"
    if args.concurrency is not None and args.concurrency > MAX_CONCURRENCY:
        return f"--concurrency: must be <= {MAX_CONCURRENCY}, got {args.concurrency}"
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        return f"--rate: must be > 0 requests per second, got {args.rate}"
    if args.requests is not None and args.requests < 1:
        return f"--requests: must be an integer >= 1, got {args.requests}"
    if args.requests is not None and args.requests > MAX_REQUESTS:
        return f"--requests: must be <= {MAX_REQUESTS}, got {args.requests}"
    if args.length_spread is not None and not 0 <= args.length_spread < 1:
        return f"--length-spread: must be in [0, 1), got {args.length_spread}"
    if args.protocol is not None and args.protocol not in PROTOCOL_PRESETS:
        return f"--protocol: must be one of {', '.join(PROTOCOL_PRESETS)}, got {args.protocol!r}"
    closed = args.requests is not None or args.length_spread is not None or args.steady_state
    if closed and args.concurrency is None:
        return "--requests/--length-spread/--steady-state: need --concurrency (closed loop)"
    if args.protocol == "poisson" and args.rate is None:
        return "--protocol: poisson needs --rate"
    if args.protocol not in (None, "poisson") and args.concurrency is None:
        return f"--protocol: {args.protocol} needs --concurrency"
    if (
        args.requests is not None
        and args.concurrency is not None
        and args.requests < args.concurrency
    ):
        return f"--requests: must be >= --concurrency {args.concurrency}, got {args.requests}"
    if not 0 < args.gpu_memory_utilization <= 1:
        return f"--gpu-memory-utilization: must be in (0, 1], got {args.gpu_memory_utilization}"
    if args.price_per_gpu_h is not None and not args.price_per_gpu_h >= 0:
        return f"--price-per-gpu-h: must be >= 0, got {args.price_per_gpu_h}"
    choices = (
        ("--engine", args.engine, ENGINES),
        ("--kv-cache-dtype", args.kv_cache_dtype, ("auto", "fp8")),
        ("--interconnect", args.interconnect, (None, *_LINKS)),
        ("--pcie-gen", args.pcie_gen, (None, 3, 4, 5, 6)),
    )
    for flag, value, allowed in choices:
        if value not in allowed:
            names = ", ".join(str(a) for a in allowed if a is not None)
            return f"{flag}: must be one of {names}, got {value!r}"
    return None


def _environment(catalog: Any, args: argparse.Namespace, gpu: str) -> Any:
    """The environment whose interconnect the GPUs use: ``--instance``, then overrides."""
    from koi.catalog import PCIE_X16_GB_S
    from koi.types import Environment

    env = None
    if args.instance is not None:
        cloud, _, name = args.instance.partition("/")
        inst = catalog.instance(cloud, name)
        if inst.gpu != gpu:
            raise InvalidInput(f"--instance: {inst.id} has {inst.gpu} GPUs, not {gpu}")
        env = inst.environments()[0]
    if args.interconnect is None and args.pcie_gen is None:
        return env
    if env is None:
        env = Environment("cli", "local", "on_demand", "cli", gpu, 1, 0.0)
    return attrs.evolve(
        env,
        link=args.interconnect or env.link,
        link_gb_s=PCIE_X16_GB_S[args.pcie_gen] if args.pcie_gen else env.link_gb_s,
    )


def _protocol(args: argparse.Namespace) -> Any:
    """The load protocol the flags describe: a named suite's, then the explicit overrides."""
    from koi.surrogate import LoadProtocol, protocol_preset

    if args.protocol is not None:
        proto = protocol_preset(args.protocol, concurrency=args.concurrency, rate_rps=args.rate)
    elif args.rate is not None:
        return LoadProtocol.open_loop(args.rate)
    else:
        proto = LoadProtocol.closed_loop(args.concurrency)
    if proto.rate_rps is not None:
        return proto
    changes: dict[str, Any] = {}
    if args.requests is not None:
        changes["request_count"] = args.requests
    if args.length_spread is not None:
        changes["length_range"] = (1.0 - args.length_spread, 1.0 + args.length_spread)
    if args.steady_state:
        changes["burst"] = False
    return attrs.evolve(proto, **changes)


def _precisions(text: str) -> tuple[Any, ...]:
    """``--precisions bf16,fp8`` as the job's precision set; a bad name is one clear error."""
    from koi.types import to_precisions

    names = [n.strip() for n in text.split(",") if n.strip()]
    accepted = to_precisions(names)
    if not names or not all(isinstance(q, enum.Enum) for q in accepted):
        msg = f"--precisions: must be a comma-separated list of bf16, fp8, int4, got {text!r}"
        raise InvalidInput(msg)
    return accepted


def _verdict(config: Any, accepted: tuple[Any, ...]) -> dict[str, Any]:
    from koi.types import config_precision_verdict

    reason = config_precision_verdict(config, accepted)
    return {
        "precisions": [q.value for q in accepted],
        "accepted": reason is None,
        "reason": None if reason is None else f"precision policy: {reason}",
    }


def _run(args: argparse.Namespace) -> int:
    from koi.catalog import load_catalog
    from koi.surrogate import AicProfiles, SurrogateConfig, predict_serving
    from koi.types import Config

    problem = _bad_input(args)
    if problem is not None:
        print(f"koi predict: error: {problem}", file=sys.stderr)
        return 2
    try:
        accepted = None if args.precisions is None else _precisions(args.precisions)
    except InvalidInput as exc:
        print(f"koi predict: error: {exc}", file=sys.stderr)
        return 2
    catalog = load_catalog()
    cfg = SurrogateConfig(use_replay=not args.analytic)
    gpu = catalog.gpu(args.gpu)
    model = catalog.model(args.model)
    config = Config(
        engine=args.engine,
        tp=args.tp,
        pp=args.pp,
        quant=args.quant,
        max_batch_size=args.max_batch,
        max_batched_tokens=args.max_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        cuda_graphs=not args.eager,
        chunked_prefill=not args.no_chunked_prefill,
        max_model_len=args.max_model_len,
        kv_cache_dtype=args.kv_cache_dtype,
    )
    environment = _environment(catalog, args, gpu.name)
    pred = predict_serving(
        gpu,
        model,
        config,
        isl=args.isl,
        osl=args.osl,
        replicas=args.replicas,
        protocol=_protocol(args),
        price_usd_per_gpu_h=_price(catalog, gpu.name, args.price_per_gpu_h),
        cfg=cfg,
        profiles=AicProfiles(cfg) if args.backend == "aic" else None,
        candidates=catalog.models.values(),
        environment=environment,
    )
    data = _finite(pred.to_dict())
    policy = None if accepted is None else _verdict(config, accepted)
    if policy is not None:
        data["precision_policy"] = policy
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    if policy is not None:
        if policy["accepted"]:
            used = config.quant.value + (" + fp8 KV" if config.kv_cache_dtype == "fp8" else "")
            print(f"precision policy: {used} accepted ({args.precisions})")
        else:
            # What the deployment would do is still shown: the policy is not physics.
            print(f"infeasible for this job (C2): {policy['reason']}")
    if not pred.feasible:
        print(f"infeasible: {pred.reason}")
        return 0
    print(f"{model.name} on {args.replicas} x {config.gpus} x {gpu.name} ({config.quant.value})")
    if pred.substituted_from:
        print(f"  (profile of {pred.substituted_from}, rescaled: nearest architecture)")
    for key in (
        "mean_ttft_ms",
        "p50_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p50_tpot_ms",
        "p99_tpot_ms",
        "throughput_tok_s",
    ):
        print(f"  {key:<20} {data[key]:>12.2f}")
    print(f"  {'kv_capacity_tokens':<20} {pred.kv_capacity_tokens:>12d}")
    if pred.cost_per_mtok_usd is not None:
        print(f"  {'cost_per_mtok_usd':<20} {pred.cost_per_mtok_usd:>12.4f}")
    for key, value in sorted(pred.mediators.items()):
        print(f"  {key:<20} {value:>12.4f}")
    return 0
