"""The analytic performance model: a deployment's ceilings and where a step's time goes.

A decode step is bounded below by reading the weights it touches and the KV cache
(memory time) or by its FLOPs (compute time), whichever is longer, plus the
collectives the layout needs and a per-step engine overhead. Everything is an upper
bound on speed: datasheet peaks (or probe measurements), perfect overlap of memory and
compute, uniform expert routing, no queueing. docs/MODEL.md has the formulas.

The simulator's entry points are the scalar functions `decode_step_s`, `prefill_s`,
`step_s` and `kv_capacity_tokens`; `servelab.model.analysis.analyze` builds the CLI's
report from the rest.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path

from servelab.core.errors import ConfigError
from servelab.core.units import GIB, US_PER_S
from servelab.model._costs import Costs, CriticalPath, Work, forward, stage_costs
from servelab.model.calibration import Calibration, calibration_from_probe
from servelab.model.configs import ModelConfig
from servelab.model.deployment import (
    DEFAULT_ACTIVATION_RESERVE_BYTES,
    DEFAULT_MEM_FRACTION,
    DEFAULT_STEP_OVERHEAD_US,
    Deployment,
)
from servelab.model.formats import (
    FORMAT_BITS,
    KV_DTYPE_BYTES,
    Format,
    parse_kv_dtype,
    weight_plan,
)
from servelab.model.gpus import GPUS, GpuSpec, gpu_by_slug
from servelab.model.kernels import KernelStyle, count_kernels, floor_of_step
from servelab.model.layout import MAX_DEGREE, Layout, check_layout
from servelab.model.params import count_params
from servelab.model.presets import resolve_model
from servelab.model.results import (
    Bound,
    KernelCounts,
    KernelFloor,
    KvCapacity,
    StepBreakdown,
    WeightMemory,
)

__all__ = [
    "check_fits",
    "decode_step",
    "decode_step_s",
    "deploy",
    "kernel_counts",
    "kernel_floor",
    "kv_capacity",
    "kv_capacity_tokens",
    "prefill",
    "prefill_s",
    "step",
    "step_s",
    "weight_memory",
]


def deploy(
    model: str | ModelConfig,
    *,
    gpu: str | GpuSpec | None = None,
    gpus: int | None = None,
    tp: int | None = None,
    pp: int = 1,
    ep: int = 1,
    dp: int = 1,
    weights: str | None = None,
    attention_weights: str | None = None,
    kv_dtype: str = "bf16",
    kernels: KernelStyle | str | None = None,
    step_overhead_us: float = DEFAULT_STEP_OVERHEAD_US,
    mem_fraction: float = DEFAULT_MEM_FRACTION,
    activation_reserve_bytes: int = DEFAULT_ACTIVATION_RESERVE_BYTES,
    calibration: Calibration | str | Path | None = None,
) -> Deployment:
    """A checked Deployment: presets and slugs resolved, the layout valid, the model fitting.

    `model` is a preset name, a config.json path or a ModelConfig. Left out, the GPU (and,
    with no tp either, the GPU count) comes from the preset's typical deployment, the
    count is tp x pp x dp, tp is the count / (pp x dp), and the weight format is the
    preset's (or the checkpoint's, else bf16); the kernel style is the preset's (else fused).
    """
    if isinstance(model, ModelConfig):
        config, preset, name = model, None, model.family
    else:
        config, preset = resolve_model(model)
        name = preset.name if preset is not None else model
    if gpu is None:
        if preset is None or preset.gpu is None:
            raise ConfigError(f"say which GPU {name} runs on", hint=f"--gpu {', '.join(GPUS)}")
        gpu = preset.gpu
    spec = gpu if isinstance(gpu, GpuSpec) else gpu_by_slug(gpu)
    if gpus is None:
        typical = preset.gpus if preset is not None and tp is None else None
        gpus = typical or (tp or 1) * pp * dp
    if tp is None:
        if gpus % (pp * dp):
            raise ConfigError(f"{gpus} GPUs do not divide into pp={pp} x dp={dp}")
        tp = gpus // (pp * dp)
    for key, value in (("tp", tp), ("pp", pp), ("ep", ep), ("dp", dp), ("GPU count", gpus)):
        if value < 1:
            raise ConfigError(f"{key} must be at least 1, got {value}")
        if value > MAX_DEGREE:
            raise ConfigError(f"{key} must be at most {MAX_DEGREE:,}")
    layout = Layout(tp=tp, pp=pp, ep=ep, dp=dp)
    check_layout(layout, config, gpus)
    fmt = weights or (preset.weights if preset else None) or config.checkpoint_format or "bf16"
    if not 0 < mem_fraction <= 1:
        raise ConfigError(f"memory fraction must be in (0, 1], got {mem_fraction:g}")
    if not 0 <= step_overhead_us < float("inf"):
        raise ConfigError(f"step overhead must be at least 0 us, got {step_overhead_us:g}")
    if isinstance(calibration, str | Path):
        calibration = calibration_from_probe(calibration)
    style = _kernel_style(kernels, preset.kernels if preset is not None else KernelStyle.FUSED)
    dep = Deployment(
        model_name=name,
        model=config,
        gpu=spec,
        layout=layout,
        weights=weight_plan(fmt, attention=attention_weights),
        kv_dtype=parse_kv_dtype(kv_dtype),
        kernels=style,
        step_overhead_us=step_overhead_us,
        mem_fraction=mem_fraction,
        activation_reserve_bytes=activation_reserve_bytes,
        calibration=calibration,
    )
    check_fits(dep)
    return dep


def weight_memory(dep: Deployment) -> WeightMemory:
    """Weights one GPU of the heaviest stage holds, by component."""
    stages = _costs(dep).stages
    heaviest = max(stages, key=lambda s: sum(s.stored_bytes.values())).stored_bytes
    params = count_params(dep.model).total
    plan = dep.weights

    def nbytes(count: int, fmt: Format) -> float:
        return count * FORMAT_BITS[fmt] / 8

    model_bytes = (
        nbytes(params.embeddings + params.lm_head, plan.embeddings)
        + nbytes(params.attention, plan.attention)
        + nbytes(params.dense_mlp + params.experts + params.shared_experts, plan.mlp)
        + nbytes(params.router + params.norms, plan.router)
    )
    return WeightMemory(
        embeddings_bytes=heaviest["embeddings"],
        attention_bytes=heaviest["attention"],
        dense_mlp_bytes=heaviest["dense_mlp"],
        experts_bytes=heaviest["experts"],
        shared_experts_bytes=heaviest["shared_experts"],
        router_and_norms_bytes=heaviest["router_and_norms"],
        lm_head_bytes=heaviest["lm_head"],
        per_gpu_bytes=sum(heaviest.values()),
        model_bytes=model_bytes,
    )


def kv_capacity(dep: Deployment, input_len: int = 0, output_len: int = 0) -> KvCapacity:
    """KV room per GPU and the tokens and requests (of input + output tokens) it holds.

    A ConfigError when the weights and the reserve leave no room on some stage.
    """
    check_fits(dep)
    costs = _costs(dep)
    usable = dep.gpu.memory_bytes * dep.mem_fraction
    per_layer = costs.kv_token_layer_bytes + costs.index_token_layer_bytes
    replica_tokens = math.inf
    worst_weights, worst_pool, worst_kv = 0.0, math.inf, 0.0
    for stage in costs.stages:
        weights = sum(stage.stored_bytes.values())
        pool = usable - weights - dep.activation_reserve_bytes
        kv_token_gpu = stage.layers * per_layer
        tokens = pool / kv_token_gpu
        if tokens < replica_tokens:
            replica_tokens, worst_pool, worst_kv = tokens, pool, kv_token_gpu
        worst_weights = max(worst_weights, weights)
    capacity = int(replica_tokens) * dep.layout.dp
    per_request = input_len + output_len
    return KvCapacity(
        kv_bytes_per_token=_kv_bytes_per_token(dep),
        kv_bytes_per_token_per_gpu=worst_kv,
        usable_bytes_per_gpu=usable,
        weights_bytes_per_gpu=worst_weights,
        activation_reserve_bytes=dep.activation_reserve_bytes,
        kv_pool_bytes_per_gpu=worst_pool,
        capacity_tokens=capacity,
        tokens_per_request=per_request,
        max_concurrency=capacity // per_request if per_request else 0,
    )


def check_fits(dep: Deployment) -> None:
    """A ConfigError unless every stage's GPUs keep room for a KV cache beside the weights
    and the activation reserve."""
    usable = dep.gpu.memory_bytes * dep.mem_fraction
    for stage in _costs(dep).stages:
        weights = sum(stage.stored_bytes.values())
        if usable - weights - dep.activation_reserve_bytes <= 0:
            raise ConfigError(
                f"{dep.model_name} does not fit: {weights / GIB:,.1f} GiB of weights per GPU "
                f"(+{dep.activation_reserve_bytes / GIB:.1f} GiB reserve) on "
                f"{dep.gpus}x {dep.gpu.slug} with {dep.layout.label}, "
                f"{usable / GIB:,.1f} GiB usable",
                hint="more GPUs, a smaller weight format, or a higher memory fraction",
            )


def kv_capacity_tokens(dep: Deployment) -> int:
    """Tokens the whole deployment's KV cache holds (the simulator's admission limit)."""
    return kv_capacity(dep).capacity_tokens


def decode_step(dep: Deployment, batch: float, context_tokens: float) -> StepBreakdown:
    """One decode step of `batch` requests (all dp replicas) each with `context_tokens` cached."""
    return step(dep, decode_batch=batch, context_tokens=context_tokens)


def decode_step_s(dep: Deployment, batch: float, context_tokens: float) -> float:
    """Seconds of one decode step; `context_tokens` is per request (the batch's mean)."""
    return step_s(dep, decode_batch=batch, context_tokens=context_tokens)


def kernel_counts(dep: Deployment) -> KernelCounts:
    """Kernels one decode step of `dep` launches, by part (servelab.model.kernels)."""
    return count_kernels(dep.model, dep.layout, dep.kernels)


def kernel_floor(dep: Deployment, batch: float, context_tokens: float) -> KernelFloor:
    """The decode step of `batch` requests bounded by its kernels' latency, eager and as a
    CUDA graph, with the GPU's per-kernel figures (a probe's where it measured them)."""
    gpu = _costs(dep).gpu
    return floor_of_step(
        kernel_counts(dep),
        decode_step(dep, batch, context_tokens),
        eager_kernel_us=gpu.eager_kernel_us,
        graph_kernel_us=gpu.graph_kernel_us,
        source=gpu.kernel_latency_source,
    )


def prefill(
    dep: Deployment, tokens: int, *, requests: int = 1, context_tokens: int = 0
) -> StepBreakdown:
    """Prefill of `tokens` new tokens for each of `requests` requests, after `context_tokens`."""
    return step(
        dep, prefill_tokens=tokens, prefill_requests=requests, prefill_context=context_tokens
    )


def prefill_s(dep: Deployment, tokens: int, *, requests: int = 1, context_tokens: int = 0) -> float:
    """Seconds to prefill `tokens` new tokens per request (overhead included)."""
    return step_s(
        dep, prefill_tokens=tokens, prefill_requests=requests, prefill_context=context_tokens
    )


def step(
    dep: Deployment,
    *,
    decode_batch: float = 0,
    context_tokens: float = 0,
    prefill_tokens: float = 0,
    prefill_requests: float = 1,
    prefill_context: float = 0,
) -> StepBreakdown:
    """One engine step: `decode_batch` decoding requests and, chunked in beside them,
    `prefill_tokens` new tokens of each of `prefill_requests` requests."""
    path, overhead = _run(
        dep, decode_batch, context_tokens, prefill_tokens, prefill_requests, prefill_context
    )
    comm = path.allreduce_s + path.alltoall_s + path.send_s
    total = path.forward_s + overhead
    terms: dict[Bound, float] = {
        "memory" if path.memory_s >= path.compute_s else "compute": path.busy_s,
        "communication": comm,
        "overhead": overhead,
    }
    new_tokens = prefill_tokens * prefill_requests
    produced = decode_batch if decode_batch else new_tokens
    return StepBreakdown(
        batch=decode_batch,
        context_tokens=context_tokens,
        prefill_tokens=new_tokens,
        weight_bytes=path.weight_bytes,
        expert_bytes=path.expert_bytes,
        kv_bytes=path.kv_bytes,
        memory_s=path.memory_s,
        flops=path.flops,
        compute_s=path.compute_s,
        gpu_busy_s=path.busy_s,
        allreduce_s=path.allreduce_s,
        allreduces=path.allreduces,
        alltoall_s=path.alltoall_s,
        pp_send_s=path.send_s,
        communication_s=comm,
        pp_bubble_fraction=path.pp_bubble_fraction,
        overhead_s=overhead,
        step_s=total,
        distinct_experts_per_layer=path.distinct_experts,
        bound=max(terms, key=lambda k: terms[k]),
        tokens_per_s=produced / total if total else 0.0,
    )


def step_s(
    dep: Deployment,
    *,
    decode_batch: float = 0,
    context_tokens: float = 0,
    prefill_tokens: float = 0,
    prefill_requests: float = 1,
    prefill_context: float = 0,
) -> float:
    """Seconds of `step(...)`, without building the breakdown (the simulator's hot path)."""
    path, overhead = _run(
        dep, decode_batch, context_tokens, prefill_tokens, prefill_requests, prefill_context
    )
    return path.forward_s + overhead


_CACHE: OrderedDict[int, tuple[Deployment, Costs]] = OrderedDict()
_CACHE_SIZE = 32


def _costs(dep: Deployment) -> Costs:
    """`stage_costs(dep)`, kept for the last few deployments (by identity: they are frozen)."""
    hit = _CACHE.get(id(dep))
    if hit is not None and hit[0] is dep:
        return hit[1]
    costs = stage_costs(dep)
    _CACHE[id(dep)] = (dep, costs)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return costs


def _run(
    dep: Deployment,
    decode_batch: float,
    context_tokens: float,
    prefill_tokens: float,
    prefill_requests: float,
    prefill_context: float,
) -> tuple[CriticalPath, float]:
    """The critical path of one step and its overhead, on the busiest dp replica."""
    if decode_batch < 0 or context_tokens < 0 or prefill_tokens < 0 or prefill_context < 0:
        raise ConfigError("batch, context and token counts must be at least 0")
    dp, pp = dep.layout.dp, dep.layout.pp
    # Requests spread over the replicas; the step lasts as long as the busiest one's.
    per_replica = float(math.ceil(decode_batch / dp)) if dp > 1 else decode_batch
    prefills = 0.0
    if prefill_tokens:
        prefills = float(math.ceil(prefill_requests / dp)) if dp > 1 else prefill_requests
    # Decode batches split into up to pp micro-batches (one per stage keeps them all busy).
    micro = max(1, min(pp, math.ceil(per_replica) if per_replica else math.ceil(prefills)))
    work = Work(
        decode_requests=per_replica / micro,
        decode_context=context_tokens,
        prefill_requests=prefills / micro,
        prefill_tokens=prefill_tokens,
        prefill_context=prefill_context,
    )
    return forward(dep, _costs(dep), work, micro), dep.step_overhead_us / US_PER_S


def _kernel_style(value: KernelStyle | str | None, default: KernelStyle) -> KernelStyle:
    if value is None:
        return default
    try:
        return KernelStyle(str(value).strip().lower())
    except ValueError:
        choices = ", ".join(style.value for style in KernelStyle)
        raise ConfigError(f"unknown kernel style {value!r}", hint=f"one of {choices}") from None


def _kv_bytes_per_token(dep: Deployment) -> float:
    """One token's cache over all layers, one copy: the model's own figure, layout aside."""
    cfg, width = dep.model, KV_DTYPE_BYTES[dep.kv_dtype]
    if cfg.mla is not None:
        per_layer = cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim
    else:
        per_layer = 2 * cfg.kv_heads * cfg.head_dim
    if cfg.sparse_attention is not None:
        per_layer += cfg.sparse_attention.index_head_dim
    return cfg.layers * per_layer * width
