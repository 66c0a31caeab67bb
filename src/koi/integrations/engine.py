"""What every launcher renders the same way: engine command lines, checkpoints and names.

A rank of a ladder is ``replicas`` copies of one chain; each copy is an inference engine (vLLM or
SGLang) started with the chain's config as flags.  The Kubernetes and SkyPilot launchers, and
``koi render``, take the command line, the checkpoint and the workload names from here, so a
manifest rendered offline and one applied by a launcher are the same.

Names are derived from the job id and the chain, never from positions in the ladder: the same
chain of the same job always gets the same workload name (re-applying it is a no-op), and a
changed chain gets a new one (that is what makes make-before-break possible).

.. versionadded:: 0.1
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import types
from collections.abc import Mapping
from typing import Any

import attrs

from koi.errors import InvalidInput
from koi.types import Chain, Quant, config_precision_verdict, to_data, to_precisions
from koi.types.validators import identifier, positive_int

__all__ = [
    "ENGINES",
    "EngineSettings",
    "chain_key",
    "check_precision",
    "checkpoint",
    "dns_label",
    "engine_command",
    "label_value",
    "multi_node_commands",
    "service_name",
    "workload_name",
]

#: engines koi can start, with the server each one runs
ENGINES = ("sglang", "vllm")


def _mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(value))


def _checkpoints(_inst: object, attribute: attrs.Attribute[object], value: object) -> None:
    assert isinstance(value, Mapping)
    for key, repo in value.items():
        if not isinstance(key, str) or not isinstance(repo, str) or not key or not repo:
            msg = f"{attribute.name}: must map model names to checkpoints, got {key!r}: {repo!r}"
            raise InvalidInput(msg)


def _policies(value: Any) -> Mapping[str, tuple[Quant, ...]]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"precisions: must map job ids to precision lists, got {value!r}")
    out = {}
    for job_id, names in value.items():
        accepted = to_precisions(names)
        if (
            not isinstance(job_id, str)
            or not isinstance(accepted, tuple)
            or not accepted
            or not all(isinstance(q, Quant) for q in accepted)
        ):
            choices = ", ".join(q.value for q in Quant)
            msg = f"precisions[{job_id!r}]: must be a non-empty list of {choices}, got {names!r}"
            raise InvalidInput(msg)
        out[job_id] = accepted
    return types.MappingProxyType(out)


def _images(_inst: object, attribute: attrs.Attribute[object], value: object) -> None:
    assert isinstance(value, Mapping)
    missing = sorted(set(ENGINES) - set(value))
    if missing:
        raise InvalidInput(f"{attribute.name}: needs an image for {missing}")


@attrs.frozen
class EngineSettings:
    """How a chain becomes an engine process.

    ``checkpoints`` maps a koi model name (or ``"model@quant"`` for a pre-quantized checkpoint,
    e.g. ``"Llama-3.1-70B@int4"``) to what the engine loads: a Hugging Face repository or a local
    path.  Without an entry, a built-in model serves the repository its catalog numbers came
    from (:func:`koi.catalog.model_sources`).  Without a pre-quantized checkpoint the engine
    quantizes at load time: FP8 with ``--quantization fp8``; INT4 with vLLM's in-flight
    bitsandbytes 4-bit or SGLang's torchao ``int4wo-128``.  Those 4-bit kernels are slower than
    AWQ/GPTQ ones, so map an ``@int4`` checkpoint for production.

    The engine knobs themselves (memory fraction, CUDA graphs, chunked prefill, context length,
    KV-cache dtype) come from the chain's :class:`~koi.types.Config`, which is what the planner
    predicted.  ``extra_args`` are appended to every command.

    ``precisions`` maps a job id to the precisions its owner accepts (``Job.precisions``); a
    rank of that job whose weights or KV cache are quantized outside them is never rendered
    (:func:`check_precision`), whoever wrote the plan.  Jobs not named are not checked here.

    .. versionadded:: 0.1
    """

    images: Mapping[str, str] = attrs.field(
        factory=lambda: {"vllm": "vllm/vllm-openai:v0.11.0", "sglang": "lmsysorg/sglang:v0.5.3"},
        converter=_mapping,
        validator=_images,
        hash=False,
    )
    checkpoints: Mapping[str, str] = attrs.field(
        factory=dict, converter=_mapping, validator=_checkpoints, hash=False
    )
    port: int = attrs.field(default=8000, validator=positive_int)
    health_path: str = attrs.field(default="/health", validator=identifier)
    #: seconds a replica may take to load its weights before its startup probe gives up
    startup_timeout_s: int = attrs.field(default=1800, validator=positive_int)
    extra_args: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    precisions: Mapping[str, tuple[Quant, ...]] = attrs.field(
        factory=dict, converter=_policies, hash=False
    )

    def image(self, engine: str) -> str:
        _check_engine(engine)
        return self.images[engine]


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        name = str(getattr(engine, "value", engine))
        msg = f"config.engine: no launcher command for engine {name!r} (known: {list(ENGINES)})"
        raise InvalidInput(msg)


def checkpoint(model: str, quant: Quant, settings: EngineSettings) -> tuple[str, bool]:
    """The checkpoint to load for ``model`` at ``quant``, and whether it is pre-quantized."""
    from koi.catalog import model_sources

    if quant is not Quant.BF16 and f"{model}@{quant.value}" in settings.checkpoints:
        return settings.checkpoints[f"{model}@{quant.value}"], True
    if model in settings.checkpoints:
        return settings.checkpoints[model], False
    sources = model_sources()
    if model not in sources:
        msg = (
            f"model {model!r} has no checkpoint: set EngineSettings.checkpoints[{model!r}] "
            "to a Hugging Face repository or a path"
        )
        raise InvalidInput(msg)
    return sources[model], False


def check_precision(job_id: str, chain: Chain, precisions: Mapping[str, tuple[Quant, ...]]) -> None:
    """Refuse (:class:`~koi.errors.InvalidInput`) a chain of ``job_id`` whose precision the
    job's owner does not accept: the launcher is the last place a plan written by hand, by an
    older koi or by another planner can be stopped before it serves answers the owner ruled out.
    """
    accepted = precisions.get(job_id)
    if accepted is None:
        return
    reason = config_precision_verdict(chain.config, accepted)
    if reason is not None:
        raise InvalidInput(f"job {job_id!r}: precision policy: {reason}; not rendered")


def engine_command(chain: Chain, settings: EngineSettings) -> tuple[str, ...]:
    """The command line of one engine process serving ``chain`` on one node.

    Every knob of the chain's config becomes a flag: tensor and pipeline parallelism, the
    quantization, the batch limit (max sequences), the chunked-prefill budget (max batched
    tokens) and whether prefill is chunked at all, the memory fraction, eager mode, the
    context length and the KV-cache dtype.

    >>> from koi.types import Config, Environment
    >>> env = Environment("aws", "us-east-1", "on_demand", "g6e.12xlarge", "L40S", 4, 10.49)
    >>> cmd = engine_command(Chain("Llama-3.1-8B", env, Config(tp=2)), EngineSettings())
    >>> " ".join(cmd[:3]), "--tensor-parallel-size" in cmd
    ('vllm serve meta-llama/Llama-3.1-8B', True)
    """
    c = chain.config
    _check_engine(c.engine)
    ckpt, prequantized = checkpoint(chain.model, c.quant, settings)
    quant: tuple[str, ...] = ()
    if c.quant is Quant.FP8 and not prequantized:
        quant = ("--quantization", "fp8")
    elif c.quant is Quant.INT4 and not prequantized:
        quant = (
            ("--quantization", "bitsandbytes")
            if c.engine == "vllm"
            else ("--torchao-config", "int4wo-128")
        )
    port = str(settings.port)
    mem = f"{c.gpu_memory_utilization:g}"
    if c.engine == "vllm":
        cmd = (
            "vllm", "serve", ckpt,
            "--host", "0.0.0.0", "--port", port,
            "--served-model-name", chain.model,
            "--tensor-parallel-size", str(c.tp),
            "--pipeline-parallel-size", str(c.pp),
            "--max-num-seqs", str(c.max_batch_size),
            "--max-num-batched-tokens", str(c.max_batched_tokens),
            "--gpu-memory-utilization", mem,
            "--enable-chunked-prefill" if c.chunked_prefill else "--no-enable-chunked-prefill",
            *quant,
        )  # fmt: skip
        if not c.cuda_graphs:
            cmd += ("--enforce-eager",)
        if c.max_model_len is not None:
            cmd += ("--max-model-len", str(c.max_model_len))
        if c.kv_cache_dtype != "auto":
            cmd += ("--kv-cache-dtype", c.kv_cache_dtype)
    else:
        chunk = c.max_batched_tokens if c.chunked_prefill else -1  # -1 turns chunking off
        cmd = (
            "python3", "-m", "sglang.launch_server",
            "--model-path", ckpt,
            "--host", "0.0.0.0", "--port", port,
            "--served-model-name", chain.model,
            "--tp-size", str(c.tp),
            "--pp-size", str(c.pp),
            "--max-running-requests", str(c.max_batch_size),
            "--chunked-prefill-size", str(chunk),
            "--max-prefill-tokens", str(c.max_batched_tokens),
            "--mem-fraction-static", mem,
            *quant,
        )  # fmt: skip
        if not c.cuda_graphs:
            cmd += ("--disable-cuda-graph",)
        if c.max_model_len is not None:
            cmd += ("--context-length", str(c.max_model_len))
        if c.kv_cache_dtype != "auto":
            cmd += ("--kv-cache-dtype", "fp8_e4m3")
    return cmd + settings.extra_args


#: the multi-node helper that ships in the vllm-openai image (starts and joins a Ray cluster)
_VLLM_MULTI_NODE = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"


def multi_node_commands(
    chain: Chain, settings: EngineSettings, nodes: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Leader and worker commands of one chain that spans ``nodes`` instances.

    Written for a LeaderWorkerSet group, whose pods see ``LWS_LEADER_ADDRESS``,
    ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``.  vLLM joins the group into a Ray cluster
    and serves from the leader; SGLang starts one server per node with ``--nnodes``.
    """
    if nodes < 2:
        raise InvalidInput(f"nodes: a multi-node chain needs at least 2 nodes, got {nodes}")
    single = engine_command(chain, settings)
    if chain.config.engine == "vllm":
        serve = shlex.join((*single, "--distributed-executor-backend", "ray"))
        leader = f"bash {_VLLM_MULTI_NODE} leader --ray_cluster_size=$(LWS_GROUP_SIZE); {serve}"
        worker = f"bash {_VLLM_MULTI_NODE} worker --ray_address=$(LWS_LEADER_ADDRESS)"
        return ("sh", "-c", leader), ("sh", "-c", worker)
    dist = (
        "--nnodes", str(nodes),
        "--node-rank", "$(LWS_WORKER_INDEX)",
        "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000",
    )  # fmt: skip
    return single + dist, single + dist


# -- names and labels ---------------------------------------------------------------------------


def chain_key(chain: Chain) -> str:
    """A short stable digest of a chain (model, environment, config): 10 hex digits."""
    text = json.dumps(to_data(chain), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def dns_label(text: str, *, max_len: int) -> str:
    """``text`` as a DNS-1123 label of at most ``max_len`` characters, kept unique.

    Lower-case letters, digits and ``-``; when the text had to change, a digest of the
    original is appended so that two job ids never map to the same name.
    """
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "job"
    if slug == text and len(slug) <= max_len:
        return slug
    tag = _digest(text, 6)
    return f"{slug[: max_len - 7].rstrip('-')}-{tag}"


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (63 characters, alphanumerics, ``-_.``), unique."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    if value == text and len(value) <= 63:
        return value
    return f"{value[:56].rstrip('-_.')}-{_digest(text, 6)}".lstrip("-")


def workload_name(job_id: str, chain: Chain) -> str:
    """Name of the workload (Deployment, LeaderWorkerSet, SkyServe service) of one rank."""
    return f"koi-{dns_label(job_id, max_len=36)}-{chain_key(chain)}"


def service_name(job_id: str) -> str:
    """Name of the job's Service that spreads requests over all its ranks."""
    return f"koi-{dns_label(job_id, max_len=48)}"
