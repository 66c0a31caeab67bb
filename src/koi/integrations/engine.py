"""What every launcher renders the same way: engine command lines, checkpoints and names.

A rank of a ladder is ``replicas`` copies of one chain; each copy is an inference engine (vLLM,
SGLang or TensorRT-LLM) started with the chain's config as flags.  The Kubernetes and SkyPilot
launchers, and ``koi render``, take the command line, the checkpoint and the workload names from
here, so a manifest rendered offline and one applied by a launcher are the same.

TensorRT-LLM runs ``trtllm-serve`` (its OpenAI-compatible server, PyTorch backend); the flags
are written for TensorRT-LLM 1.2.1, the default image.  The knobs it has no flag for (CUDA
graphs, the KV-cache dtype) and the switch that turns on its Prometheus endpoint
(``return_perf_metrics``) go into the YAML file of ``--extra_llm_api_options``, which the
command writes first: it is ``sh -c`` with a here-document.  TensorRT-LLM does not quantize at
load time, so an FP8 or INT4 chain needs a pre-quantized ``"model@quant"`` checkpoint, and it
spans nodes only through MPI, which koi does not set up: such chains are refused.

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
ENGINES = ("sglang", "trtllm", "vllm")

#: where a TensorRT-LLM command writes its ``--extra_llm_api_options`` file, in the container
_TRTLLM_OPTIONS = "/tmp/koi-llm-api-options.yaml"
#: where it puts the checkpoint, in a directory named after the model (the name it serves)
_TRTLLM_MODELS = "/tmp/koi-models"
#: fetches a Hugging Face repository into a directory (``huggingface_hub`` ships with the image)
_HF_FETCH = (
    "import sys; from huggingface_hub import snapshot_download; "
    "snapshot_download(sys.argv[1], local_dir=sys.argv[2])"
)


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


#: the image each engine runs in unless :attr:`EngineSettings.images` names another
DEFAULT_IMAGES = types.MappingProxyType(
    {
        "vllm": "vllm/vllm-openai:v0.11.0",
        "sglang": "lmsysorg/sglang:v0.5.3",
        "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:1.2.1",
    }
)


def _images(value: Mapping[str, str]) -> Mapping[str, str]:
    """The defaults with ``value``'s images over them: settings written before an engine was
    added keep working."""
    if not isinstance(value, Mapping):
        raise InvalidInput(f"images: must map engine names to images, got {value!r}")
    for engine, image in value.items():
        if engine not in ENGINES or not isinstance(image, str) or not image:
            msg = f"images[{engine!r}]: must be an image for one of {list(ENGINES)}, got {image!r}"
            raise InvalidInput(msg)
    return types.MappingProxyType({**DEFAULT_IMAGES, **value})


@attrs.frozen
class EngineSettings:
    """How a chain becomes an engine process.

    ``checkpoints`` maps a koi model name (or ``"model@quant"`` for a pre-quantized checkpoint,
    e.g. ``"Llama-3.1-70B@int4"``) to what the engine loads: a Hugging Face repository or a local
    path.  Without an entry, a built-in model serves the repository its catalog numbers came
    from (:func:`koi.catalog.model_sources`).  Without a pre-quantized checkpoint vLLM and
    SGLang quantize at load time: FP8 with ``--quantization fp8``; INT4 with vLLM's in-flight
    bitsandbytes 4-bit or SGLang's torchao ``int4wo-128``.  Those 4-bit kernels are slower than
    AWQ/GPTQ ones, so map an ``@int4`` checkpoint for production.  TensorRT-LLM serves FP8 and
    INT4 only from a pre-quantized checkpoint: an FP8 or INT4 TensorRT-LLM chain without an
    ``@fp8`` / ``@int4`` entry is refused, never served in BF16.

    ``images`` overrides the image of any engine it names (:data:`DEFAULT_IMAGES` for the
    others): ``vllm/vllm-openai:v0.11.0``, ``lmsysorg/sglang:v0.5.3`` and NVIDIA NGC's
    ``nvcr.io/nvidia/tensorrt-llm/release:1.2.1`` (TensorRT-LLM 1.2.1, the release
    :func:`engine_command` writes its flags for).

    The engine knobs themselves (memory fraction, CUDA graphs, chunked prefill, context length,
    KV-cache dtype) come from the chain's :class:`~koi.types.Config`, which is what the planner
    predicted.  ``extra_args`` are appended to every command.

    ``precisions`` maps a job id to the precisions its owner accepts (``Job.precisions``); a
    rank of that job whose weights or KV cache are quantized outside them is never rendered
    (:func:`check_precision`), whoever wrote the plan.  Jobs not named are not checked here.

    .. versionadded:: 0.1
    """

    images: Mapping[str, str] = attrs.field(factory=dict, converter=_images, hash=False)
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
    context length and the KV-cache dtype.  A TensorRT-LLM command is ``sh -c`` with a
    script that writes its options file first (see :func:`_trtllm_command`).

    >>> from koi.types import Config, Environment
    >>> env = Environment("aws", "us-east-1", "on_demand", "g6e.12xlarge", "L40S", 4, 10.49)
    >>> cmd = engine_command(Chain("Llama-3.1-8B", env, Config(tp=2)), EngineSettings())
    >>> " ".join(cmd[:3]), "--tensor-parallel-size" in cmd
    ('vllm serve meta-llama/Llama-3.1-8B', True)
    """
    c = chain.config
    _check_engine(c.engine)
    ckpt, prequantized = checkpoint(chain.model, c.quant, settings)
    if c.engine == "trtllm":
        return _trtllm_command(chain, settings, ckpt, prequantized=prequantized)
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


def _trtllm_command(
    chain: Chain, settings: EngineSettings, ckpt: str, *, prequantized: bool
) -> tuple[str, ...]:
    """``trtllm-serve`` (TensorRT-LLM 1.2.1, PyTorch backend) as ``sh -c`` with a script.

    Flags: ``--tp_size``, ``--pp_size``, ``--max_batch_size``, ``--max_num_tokens`` (the
    tokens of one iteration, also the chunk size), ``--enable_chunked_prefill`` (off unless
    given), ``--kv_cache_free_gpu_memory_fraction`` (a share of the memory left once the
    weights are loaded, not of the whole device: the config's value is passed as it is) and
    ``--max_seq_len``.  The script first writes the ``--extra_llm_api_options`` YAML as a
    here-document: ``return_perf_metrics: true`` (without it there is no
    ``/prometheus/metrics``), ``cuda_graph_config: null`` for eager mode and, for an FP8 KV
    cache, a ``kv_cache_config`` block, which replaces the whole KV-cache config the flags
    built and so repeats the memory fraction.  1.2.1 has no served-model-name flag and serves
    a local checkpoint under its directory's name, so the script serves the checkpoint from
    ``/tmp/koi-models/<model>``: a link to a local path, or a Hugging Face repository fetched
    there.  Every engine then answers to the koi model name, as one Service needs.
    """
    c = chain.config
    if c.quant is not Quant.BF16 and not prequantized:
        key = f"{chain.model}@{c.quant.value}"
        msg = (
            f"model {chain.model!r} at {c.quant.value} on trtllm: TensorRT-LLM serves "
            f"{c.quant.value} only from a pre-quantized checkpoint; set "
            f"EngineSettings.checkpoints[{key!r}] (koi render: --checkpoint {key}=REPO)"
        )
        raise InvalidInput(msg)
    if "/" in chain.model or chain.model in (".", ".."):
        msg = (
            f"model {chain.model!r} on trtllm: TensorRT-LLM serves a model under its "
            "directory's name, which cannot be that; name the model without '/'"
        )
        raise InvalidInput(msg)
    served = f"{_TRTLLM_MODELS}/{chain.model}"
    if ckpt.startswith(("/", "./", "../")):  # a local path: linked under the model's name
        fetch = shlex.join(("ln", "-sfn", ckpt, served))
    else:
        fetch = shlex.join(("python3", "-c", _HF_FETCH, ckpt, served))
    mem = f"{c.gpu_memory_utilization:g}"
    options = ["return_perf_metrics: true"]
    if not c.cuda_graphs:
        options.append("cuda_graph_config: null")
    if c.kv_cache_dtype != "auto":
        options += [
            "kv_cache_config:",
            f"  dtype: {c.kv_cache_dtype}",
            f"  free_gpu_memory_fraction: {mem}",
        ]
    serve = [
        "trtllm-serve", served,
        "--backend", "pytorch",
        "--host", "0.0.0.0", "--port", str(settings.port),
        "--tp_size", str(c.tp),
        "--pp_size", str(c.pp),
        "--max_batch_size", str(c.max_batch_size),
        "--max_num_tokens", str(c.max_batched_tokens),
        "--kv_cache_free_gpu_memory_fraction", mem,
    ]  # fmt: skip
    if c.chunked_prefill:
        serve.append("--enable_chunked_prefill")
    if c.max_model_len is not None:
        serve += ["--max_seq_len", str(c.max_model_len)]
    serve += ["--extra_llm_api_options", _TRTLLM_OPTIONS, *settings.extra_args]
    # The delimiter is quoted (a backslash): the shell expands nothing in the YAML.
    lines = (
        "set -e",  # a failed fetch must not start a server with no model
        f"cat > {_TRTLLM_OPTIONS} <<\\KOI_EOF",
        *options,
        "KOI_EOF",
        f"mkdir -p {_TRTLLM_MODELS}",
        fetch,
        f"exec {shlex.join(serve)}",
    )
    return ("sh", "-c", "\n".join(lines) + "\n")


#: the multi-node helper that ships in the vllm-openai image (starts and joins a Ray cluster)
_VLLM_MULTI_NODE = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"


def multi_node_commands(
    chain: Chain, settings: EngineSettings, nodes: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Leader and worker commands of one chain that spans ``nodes`` instances.

    Written for a LeaderWorkerSet group, whose pods see ``LWS_LEADER_ADDRESS``,
    ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``.  vLLM joins the group into a Ray cluster
    and serves from the leader; SGLang starts one server per node with ``--nnodes``.
    TensorRT-LLM is refused (:class:`~koi.errors.InvalidInput`): it spans nodes as one MPI job
    (``mpirun`` or Slurm with ``trtllm-llmapi-launch``), which needs an MPI launcher and
    passwordless SSH between the pods, and koi sets up neither.
    """
    if nodes < 2:
        raise InvalidInput(f"nodes: a multi-node chain needs at least 2 nodes, got {nodes}")
    if chain.config.engine == "trtllm":
        msg = (
            f"chain of {chain.model} on trtllm spans {nodes} nodes: koi does not render "
            "multi-node TensorRT-LLM (it runs as one MPI job across the pods); keep tp * pp "
            "within one instance's GPUs, or serve the chain on vllm or sglang"
        )
        raise InvalidInput(msg)
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
