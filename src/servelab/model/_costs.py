"""The arithmetic of one forward pass: bytes read, FLOPs, collectives, per pipeline stage.

Plain dataclasses and floats, computed once per deployment (`stage_costs`) and then per
call (`forward`): the simulator asks for a step time every step. `perf` wraps the
results in pydantic models. Every formula is in docs/MODEL.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.core.errors import ConfigError
from servelab.model.calibration import apply_calibration
from servelab.model.comm import CommModel, comm_model
from servelab.model.deployment import Deployment
from servelab.model.formats import FORMAT_BITS, KV_DTYPE_BYTES, Format, KvDtype
from servelab.model.gpus import GpuSpec
from servelab.model.params import layer_params

__all__ = [
    "ACTIVATION_BYTES",
    "Costs",
    "CriticalPath",
    "StageCosts",
    "Work",
    "expected_distinct_experts",
    "forward",
    "matmul_flops",
    "stage_costs",
]

ACTIVATION_BYTES = 2
"""Activations cross GPUs in bf16."""
_LOGIT_BYTES = 4


@dataclass(frozen=True)
class Work:
    """What one DP replica's micro-batch carries through the model; counts may be fractional."""

    decode_requests: float = 0.0
    decode_context: float = 0.0
    prefill_requests: float = 0.0
    prefill_tokens: float = 0.0
    prefill_context: float = 0.0

    @property
    def tokens(self) -> float:
        return self.decode_requests + self.prefill_requests * self.prefill_tokens

    @property
    def logit_rows(self) -> float:
        return self.decode_requests + self.prefill_requests


@dataclass(frozen=True)
class StageCosts:
    """Per-GPU constants of one pipeline stage."""

    layers: int
    moe_layers: int
    first: bool
    last: bool
    dense_read_bytes: float
    """Weights every forward reads whatever the batch: attention, dense MLPs, shared
    experts, routers, norms, LM head."""
    stored_bytes: dict[str, float]
    """Weights held, by component."""
    dense_flops_per_token: float
    dense_compute_s_per_token: float


@dataclass(frozen=True)
class Costs:
    """Per-GPU constants of a deployment."""

    gpu: GpuSpec
    """The GPU's figures after calibration."""
    comm: CommModel
    stages: tuple[StageCosts, ...]
    expert_bytes: float
    """One whole expert in its format."""
    expert_flops_per_token: float
    expert_compute_s_per_token: float
    """One token through one whole expert on one GPU."""
    attention_flops_rate: float
    """Scores and values against the cache run in its dtype: FP32 for an FP32 cache, else
    BF16 (an FP8 cache is read into BF16 math)."""
    experts_per_gpu_group: float
    """Experts one GPU holds a slice of: E, or E / ep under expert parallelism."""
    expert_tensor_shards: int
    expert_group_replicas: int
    """DP replicas whose tokens meet in one expert group (dp under EP, else 1)."""
    kv_token_layer_bytes: float
    """One token's cached K/V (or MLA latent) of one layer on one GPU."""
    index_token_layer_bytes: float
    """One token's DSA indexer key of one layer (0 without DSA)."""


@dataclass(frozen=True)
class CriticalPath:
    """A forward pass's critical path, its parts summed along it (per GPU)."""

    weight_bytes: float
    expert_bytes: float
    kv_bytes: float
    flops: float
    memory_s: float
    compute_s: float
    busy_s: float
    allreduce_s: float
    allreduces: int
    alltoall_s: float
    send_s: float
    forward_s: float
    """busy + communication: the cycle of one micro-batch."""
    pp_bubble_fraction: float
    distinct_experts: float
    """Expected distinct experts one MoE layer runs (whole expert group)."""


def matmul_flops(gpu: GpuSpec, fmt: Format) -> float:
    """Dense tensor rate a format's matmuls run at: FP8 and NVFP4 natively where the GPU has
    them (NVFP4 checkpoints are W4A4); INT4 (W4A16) and the fallbacks at the BF16 rate;
    FP32 at the device's FP32 rate, which the GPU catalogue does not hold (a CPU's does)."""
    if fmt == Format.FP32:
        if gpu.fp32_flops is None:
            raise ConfigError(
                f"{gpu.slug} has no FP32 matmul rate in the catalogue",
                hint="fp32 weights are modelled on a CPU (servelab.model.cpu)",
            )
        return gpu.fp32_flops
    if fmt == Format.FP8 and gpu.fp8_dense_flops:
        return gpu.fp8_dense_flops
    if fmt == Format.NVFP4 and gpu.fp4_dense_flops:
        return gpu.fp4_dense_flops
    return gpu.bf16_dense_flops


def stage_costs(dep: Deployment) -> Costs:
    """The per-GPU constants of `dep`'s stages and experts."""
    cfg, lay, plan = dep.model, dep.layout, dep.weights
    gpu = apply_calibration(dep.gpu, dep.calibration)[0]
    per = layer_params(cfg)
    tp = lay.tp

    def nbytes(params: float, fmt: Format) -> float:
        return params * FORMAT_BITS[fmt] / 8

    attn_rate = matmul_flops(gpu, plan.attention)
    mlp_rate = matmul_flops(gpu, plan.mlp)
    head_rate = matmul_flops(gpu, plan.embeddings)
    router_rate = matmul_flops(gpu, plan.router)
    moe = set(cfg.moe_layers)
    expert_shards = tp * lay.dp // lay.ep if lay.ep > 1 else tp
    experts_per_group = cfg.experts / lay.ep
    head_params = cfg.vocab * cfg.hidden
    stages: list[StageCosts] = []
    for s in range(lay.pp):
        lo, hi = s * cfg.layers // lay.pp, (s + 1) * cfg.layers // lay.pp
        n = hi - lo
        n_moe = sum(1 for i in range(lo, hi) if i in moe)
        first, last = s == 0, s == lay.pp - 1
        stored = {
            "attention": nbytes(n * per.attention, plan.attention) / tp,
            "dense_mlp": nbytes((n - n_moe) * per.dense_mlp, plan.mlp) / tp,
            "shared_experts": nbytes(n_moe * per.shared_experts, plan.mlp) / tp,
            "router_and_norms": nbytes(n_moe * per.router, plan.router)
            + nbytes(n * per.norms + (cfg.hidden if last else 0), plan.router),
            "experts": n_moe * experts_per_group * nbytes(per.expert, plan.mlp) / expert_shards,
            "embeddings": nbytes(head_params, plan.embeddings) / tp if first else 0.0,
            # A tied head is the embedding table, unless the two ends sit on two stages.
            "lm_head": nbytes(head_params, plan.embeddings) / tp
            if last and not (cfg.tie_embeddings and first)
            else 0.0,
        }
        head_read = nbytes(head_params, plan.embeddings) / tp if last else 0.0
        dense_read = sum(stored.values()) - stored["experts"] - stored["embeddings"]
        dense_read += head_read - stored["lm_head"]
        # (parameters one token multiplies on this GPU, the rate they run at)
        matmuls = (
            (n * per.attention / tp, attn_rate),
            (((n - n_moe) * per.dense_mlp + n_moe * per.shared_experts) / tp, mlp_rate),
            (n_moe * per.router, router_rate),
            (head_params / tp if last else 0.0, head_rate),
        )
        stages.append(
            StageCosts(
                layers=n,
                moe_layers=n_moe,
                first=first,
                last=last,
                dense_read_bytes=dense_read,
                stored_bytes=stored,
                dense_flops_per_token=sum(2 * p for p, _ in matmuls),
                dense_compute_s_per_token=sum(2 * p / rate for p, rate in matmuls),
            )
        )
    kv_bytes = KV_DTYPE_BYTES[dep.kv_dtype]
    if cfg.mla is not None:
        # The latent is shared by all heads: every TP rank keeps (and reads) all of it.
        kv_layer = (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * kv_bytes
    else:
        # KV heads are sharded by tp; with more ranks than heads each rank keeps one.
        kv_layer = 2 * max(cfg.kv_heads / tp, 1.0) * cfg.head_dim * kv_bytes
    dsa = cfg.sparse_attention
    return Costs(
        gpu=gpu,
        comm=comm_model(dep.gpu, dep.calibration),
        stages=tuple(stages),
        expert_bytes=nbytes(per.expert, plan.mlp),
        expert_flops_per_token=2 * per.expert,
        expert_compute_s_per_token=2 * per.expert / mlp_rate,
        attention_flops_rate=matmul_flops(
            gpu, Format.FP32 if dep.kv_dtype == KvDtype.FP32 else Format.BF16
        ),
        experts_per_gpu_group=experts_per_group,
        expert_tensor_shards=expert_shards,
        expert_group_replicas=lay.dp if lay.ep > 1 else 1,
        kv_token_layer_bytes=kv_layer,
        index_token_layer_bytes=dsa.index_head_dim * kv_bytes if dsa is not None else 0.0,
    )


def forward(dep: Deployment, costs: Costs, work: Work, micro_batches: int) -> CriticalPath:
    """One forward pass of `work` (per replica and micro-batch) with `micro_batches` in flight.

    A micro-batch's cycle is the longer of its own trip through the stages and the
    bottleneck stage's time for all micro-batches: max(sum t_s, m x max t_s).
    """
    times = [_stage(dep, costs, stage, work) for stage in costs.stages]
    serial = sum(t["total_s"] for t in times)
    slowest = max(times, key=lambda t: t["total_s"])
    if serial >= micro_batches * slowest["total_s"]:
        path = {key: sum(t[key] for t in times) for key in times[0]}
    else:
        path = {key: micro_batches * value for key, value in slowest.items()}
    cycle = path["total_s"]
    pp = len(costs.stages)
    bubble = 1 - micro_batches * serial / (pp * cycle) if pp > 1 and cycle > 0 else 0.0
    return CriticalPath(
        weight_bytes=path["weight_bytes"],
        expert_bytes=path["expert_bytes"],
        kv_bytes=path["kv_bytes"],
        flops=path["flops"],
        memory_s=path["memory_s"],
        compute_s=path["compute_s"],
        busy_s=path["busy_s"],
        allreduce_s=path["allreduce_s"],
        allreduces=round(path["allreduces"]),
        alltoall_s=path["alltoall_s"],
        send_s=path["send_s"],
        forward_s=cycle,
        pp_bubble_fraction=max(0.0, bubble),
        distinct_experts=max(t["distinct_experts"] for t in times),
    )


def expected_distinct_experts(experts: int, per_token: int, tokens: float) -> float:
    """E x (1 - (1 - k/E)^T): experts at least one of T uniformly routed tokens picks."""
    if experts == 0 or tokens <= 0:
        return 0.0
    return experts * (1 - (1 - per_token / experts) ** tokens)


def _stage(dep: Deployment, costs: Costs, stage: StageCosts, work: Work) -> dict[str, float]:
    cfg, lay, gpu, comm = dep.model, dep.layout, costs.gpu, costs.comm
    tokens = work.tokens
    # Experts: the group's tokens pick among E; this GPU holds a slice of E/ep of them.
    group_tokens = tokens * costs.expert_group_replicas
    distinct = expected_distinct_experts(cfg.experts, cfg.experts_per_token, group_tokens)
    share = costs.experts_per_gpu_group / cfg.experts if cfg.experts else 0.0
    expert_bytes = stage.moe_layers * distinct * share * costs.expert_bytes
    expert_bytes /= costs.expert_tensor_shards
    # Expert work spreads evenly over the tp x (dp under EP) GPUs of the group.
    expert_tokens = stage.moe_layers * group_tokens * cfg.experts_per_token
    expert_tokens /= lay.tp * costs.expert_group_replicas
    kv_bytes, attn_flops = _attention(dep, costs, work)
    kv_bytes *= stage.layers
    attn_flops *= stage.layers
    weight_bytes = stage.dense_read_bytes
    memory_s = (weight_bytes + expert_bytes + kv_bytes) / gpu.memory_bandwidth_bytes_s
    compute_s = tokens * stage.dense_compute_s_per_token
    compute_s += expert_tokens * costs.expert_compute_s_per_token
    compute_s += attn_flops / costs.attention_flops_rate
    flops = tokens * stage.dense_flops_per_token + attn_flops
    flops += expert_tokens * costs.expert_flops_per_token
    # Two all-reduces per layer (after attention, after the MLP), one for the
    # vocab-parallel embedding; the head's logits are all-gathered for sampling.
    allreduces = 2 * stage.layers + (1 if stage.first else 0)
    allreduce_s = allreduces * comm.allreduce_s(tokens * cfg.hidden * ACTIVATION_BYTES, lay.tp)
    if stage.last:
        logits = work.logit_rows * cfg.vocab * _LOGIT_BYTES
        allreduce_s += comm.allgather_s(logits, lay.tp)
    alltoall_s = 0.0
    if lay.ep > 1 and stage.moe_layers:
        sent = group_tokens / lay.ep * cfg.experts_per_token * cfg.hidden * ACTIVATION_BYTES
        sent *= (lay.ep - 1) / lay.ep
        alltoall_s = 2 * stage.moe_layers * comm.alltoall_s(sent)  # dispatch and combine
    send_s = 0.0 if stage.last else comm.send_s(tokens * cfg.hidden * ACTIVATION_BYTES)
    busy_s = max(memory_s, compute_s)
    return {
        "weight_bytes": weight_bytes,
        "expert_bytes": expert_bytes,
        "kv_bytes": kv_bytes,
        "flops": flops,
        "memory_s": memory_s,
        "compute_s": compute_s,
        "busy_s": busy_s,
        "allreduce_s": allreduce_s,
        "allreduces": float(allreduces if lay.tp > 1 else 0),
        "alltoall_s": alltoall_s,
        "send_s": send_s,
        "total_s": busy_s + allreduce_s + alltoall_s + send_s,
        "distinct_experts": distinct if stage.moe_layers else 0.0,
    }


def _attention(dep: Deployment, costs: Costs, work: Work) -> tuple[float, float]:
    """(KV bytes read, attention FLOPs) of one layer on one GPU for `work`."""
    cfg = dep.model
    heads_gpu = cfg.heads / dep.layout.tp
    dsa, mla = cfg.sparse_attention, cfg.mla
    topk = dsa.index_topk if dsa is not None else math.inf
    kv_token, index_token = costs.kv_token_layer_bytes, costs.index_token_layer_bytes
    index_flops_pair = 2 * dsa.index_n_heads * dsa.index_head_dim if dsa is not None else 0.0
    # Decode: each request reads its context (DSA: top-k entries, but every indexer key).
    decode_ctx = work.decode_context
    attended = min(decode_ctx, topk)
    kv = work.decode_requests * (attended * kv_token + decode_ctx * index_token)
    if mla is not None:
        # Absorbed MLA: scores against the latent and rope key, values from the latent.
        pair = 2 * heads_gpu * (2 * mla.kv_lora_rank + mla.qk_rope_head_dim)
    else:
        pair = 4 * heads_gpu * cfg.head_dim
    flops = work.decode_requests * (attended * pair + decode_ctx * index_flops_pair)
    if work.prefill_requests and work.prefill_tokens:
        n, prior = work.prefill_tokens, work.prefill_context
        every = n * prior + n * (n + 1) / 2
        capped = _capped_pairs(prior, n, topk) if dsa is not None else every
        if mla is not None:
            # Prefill runs MLA as plain multi-head attention on decompressed K and V.
            qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            prefill_pair = 2 * heads_gpu * (qk + mla.v_head_dim)
        else:
            prefill_pair = pair
        flops += work.prefill_requests * (capped * prefill_pair + every * index_flops_pair)
        kv += work.prefill_requests * (prior + n) * (kv_token + index_token)
    return kv, flops


def _capped_pairs(prior: float, new: float, cap: float) -> float:
    """sum over positions p = prior+1 .. prior+new of min(p, cap): DSA's attended pairs."""
    lo, hi = prior + 1, prior + new
    if hi <= cap:
        return (lo + hi) * new / 2
    if lo > cap:
        return new * cap
    return (lo + cap) * (cap - lo + 1) / 2 + (hi - cap) * cap
