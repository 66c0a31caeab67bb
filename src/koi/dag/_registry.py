"""The curated registered edge set: each edge with the one-line physical reason it exists.

Kept as data.  An edge belongs here only when there is a mechanism in the serving stack that
makes the parent move the child; the table is deliberately sparse (DESIGN §4.1, §14).
"""

from __future__ import annotations

__all__ = ["REGISTERED_EDGES"]

# (parent, child, physical reason)
REGISTERED_EDGES: tuple[tuple[str, str, str], ...] = (
    # --- X -> V ------------------------------------------------------------------------------
    ("x:gpu_type", "v:mem_bw_util", "HBM bandwidth sets how close decode runs to the memory roof"),
    (
        "x:gpu_type",
        "v:compute_util",
        "peak tensor FLOPS sets the compute roof prefill works against",
    ),
    (
        "x:gpu_type",
        "v:memory_pressure",
        "VRAM capacity is the denominator of weights + activations",
    ),
    ("x:gpu_type", "v:kv_cache_util", "VRAM left after the weights bounds the KV-cache blocks"),
    (
        "x:interconnect",
        "v:comm_share",
        "link bandwidth and latency set the time of each collective",
    ),
    ("x:tp", "v:comm_share", "tensor parallelism adds two all-reduces per layer per step"),
    ("x:tp", "v:memory_pressure", "tensor parallelism shards the weights over tp GPUs"),
    ("x:tp", "v:kv_cache_util", "sharded weights free VRAM, so the same traffic fills less KV"),
    (
        "x:tp",
        "v:mem_bw_util",
        "each GPU streams a smaller weight shard, so per-GPU bandwidth use drops",
    ),
    ("x:pp", "v:bubble_fraction", "pipeline stages idle while micro-batches fill and drain"),
    ("x:pp", "v:memory_pressure", "pipeline parallelism splits the layers over pp GPUs"),
    ("x:pp", "v:comm_share", "activations cross every stage boundary each step"),
    ("x:quant", "v:memory_pressure", "fewer bytes per weight shrink the resident model"),
    ("x:quant", "v:mem_bw_util", "fewer weight bytes are streamed per decode step"),
    ("x:quant", "v:compute_util", "fp8/int4 tensor cores and dequantisation change the math rate"),
    ("x:quant", "v:kv_cache_util", "smaller weights leave more VRAM for KV blocks"),
    ("x:engine", "v:compute_util", "kernels, graph capture and fusion set the achieved FLOPS"),
    ("x:engine", "v:preemption_rate", "the engine's scheduler decides when KV blocks are evicted"),
    ("x:engine", "v:prefill_share", "the engine's scheduler decides how prefill and decode mix"),
    ("x:max_batch_size", "v:mean_batch_size", "the cap bounds how many sequences run per step"),
    ("x:max_batch_size", "v:kv_cache_util", "more concurrent sequences hold more KV blocks"),
    (
        "x:max_batch_size",
        "v:preemption_rate",
        "admitting more sequences than KV fits forces evictions",
    ),
    ("x:max_batch_size", "v:queue_depth", "a low cap leaves arrivals waiting in the queue"),
    (
        "x:max_batched_tokens",
        "v:prefill_share",
        "the chunked-prefill budget sets prompt tokens per step",
    ),
    ("x:max_batched_tokens", "v:compute_util", "larger prefill chunks keep the tensor cores busy"),
    ("x:replicas", "v:queue_depth", "traffic splits over the replicas, so each queue is shorter"),
    ("x:replicas", "v:mean_batch_size", "each replica sees 1/n of the traffic, so batches shrink"),
    ("x:routing", "v:queue_depth", "least-loaded routing evens out the per-replica queues"),
    (
        "x:routing",
        "v:prefix_hit_rate",
        "prefix-affinity routing keeps a prefix's requests on the replicas that cache it",
    ),
    (
        "x:replicas",
        "v:prefix_hit_rate",
        "under prefix affinity more replicas split the prefixes, so each caches fewer",
    ),
    (
        "x:max_batch_size",
        "v:prefix_hit_rate",
        "a larger batch leaves less KV for cached prefixes, which are evicted first",
    ),
    ("x:gpu_type", "v:prefix_hit_rate", "VRAM left after the weights bounds the cached prefixes"),
    ("x:market", "v:queue_depth", "spot reclaims remove replicas and the survivors queue the load"),
    # --- V -> Y ------------------------------------------------------------------------------
    (
        "v:kv_cache_util",
        "y:throughput_tok_s",
        "KV capacity caps the concurrency that sets throughput",
    ),
    ("v:kv_cache_util", "y:p99_ttft_ms", "a full KV cache delays admission of new prompts"),
    (
        "v:mean_batch_size",
        "y:throughput_tok_s",
        "larger batches amortise each weight read over more tokens",
    ),
    (
        "v:mean_batch_size",
        "y:p99_tpot_ms",
        "each decode step carries more sequences and takes longer",
    ),
    (
        "v:mean_batch_size",
        "y:cost_per_mtok_usd",
        "more tokens per step spread the GPU-hour over more tokens",
    ),
    ("v:queue_depth", "y:p99_ttft_ms", "queued requests wait before their first token"),
    ("v:prefix_hit_rate", "y:p99_ttft_ms", "a cached prefix is not prefilled again"),
    (
        "v:prefix_hit_rate",
        "y:throughput_tok_s",
        "skipped prefill frees step time and KV blocks for decoding",
    ),
    (
        "v:prefix_hit_rate",
        "y:cost_per_mtok_usd",
        "less prefill per request serves more tokens per GPU-hour",
    ),
    ("v:queue_depth", "y:slo_margin", "queueing eats the latency headroom first"),
    ("v:mem_bw_util", "y:p99_tpot_ms", "decode is memory-bound: step time is bytes over bandwidth"),
    ("v:mem_bw_util", "y:throughput_tok_s", "bandwidth utilisation sets the decode token rate"),
    ("v:mem_bw_util", "y:cost_per_mtok_usd", "idle bandwidth is paid for and produces no tokens"),
    ("v:compute_util", "y:p99_ttft_ms", "prefill is compute-bound: prompt time is FLOPs over rate"),
    ("v:compute_util", "y:throughput_tok_s", "achieved FLOPS bound large-batch token rate"),
    ("v:comm_share", "y:p99_tpot_ms", "collective time adds to every decode step"),
    ("v:comm_share", "y:p99_ttft_ms", "collectives also run inside every prefill"),
    ("v:comm_share", "y:slo_margin", "communication overhead eats latency headroom"),
    ("v:bubble_fraction", "y:throughput_tok_s", "idle pipeline stages waste GPU time"),
    ("v:bubble_fraction", "y:p99_tpot_ms", "a token waits for every stage in turn"),
    ("v:bubble_fraction", "y:cost_per_mtok_usd", "bubbles are paid GPU time without tokens"),
    ("v:preemption_rate", "y:p99_tpot_ms", "evicted sequences stall and recompute their KV"),
    ("v:preemption_rate", "y:p99_ttft_ms", "evicted requests go back to the queue"),
    ("v:prefill_share", "y:p99_tpot_ms", "prefill chunks stall the decodes that share the step"),
    ("v:prefill_share", "y:p99_ttft_ms", "more prefill per step finishes prompts sooner"),
    ("v:prefill_share", "y:slo_margin", "the prefill/decode mix trades TTFT against TPOT headroom"),
    ("v:memory_pressure", "y:throughput_tok_s", "little free VRAM leaves little room for batching"),
    (
        "v:memory_pressure",
        "y:cost_per_mtok_usd",
        "a model that barely fits runs small, expensive batches",
    ),
)
