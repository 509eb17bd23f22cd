"""A deployment's whole picture: throughput by concurrency and the `servelab model` report."""

from __future__ import annotations

from servelab.core.units import MS_PER_S, US_PER_S
from servelab.model.comm import comm_model
from servelab.model.deployment import Deployment, replaced_figures
from servelab.model.params import count_params
from servelab.model.perf import (
    decode_step,
    kernel_floor,
    kv_capacity,
    prefill,
    prefill_s,
    weight_memory,
)
from servelab.model.results import ModelReport, ThroughputPoint

__all__ = ["analyze", "concurrency_levels", "throughput_curve"]


def concurrency_levels(limit: int) -> list[int]:
    """1, 2, 4, ... below `limit`, then `limit` itself."""
    levels, level = [], 1
    while level < limit:
        levels.append(level)
        level *= 2
    if limit >= 1:
        levels.append(limit)
    return levels


def throughput_curve(
    dep: Deployment, input_len: int, output_len: int, concurrencies: list[int] | None = None
) -> list[ThroughputPoint]:
    """Steady-state throughput by concurrency, by default 1, 2, 4, ... up to the KV limit.

    Each request's cycle is one prefill of its input and output_len decode steps at the
    mean context input + output/2; the batch's prefill is charged once per cycle.
    """
    if concurrencies is None:
        concurrencies = concurrency_levels(kv_capacity(dep, input_len, output_len).max_concurrency)
    context = input_len + output_len / 2
    points = []
    for level in concurrencies:
        decode = decode_step(dep, level, context)
        fill = prefill_s(dep, input_len, requests=level) if input_len else 0.0
        cycle = output_len * decode.step_s + fill
        points.append(
            ThroughputPoint(
                concurrency=level,
                tpot_ms=decode.step_s * MS_PER_S,
                prefill_s=fill,
                output_tokens_per_s=level * output_len / cycle if cycle else 0.0,
                total_tokens_per_s=level * (input_len + output_len) / cycle if cycle else 0.0,
                bound=decode.bound,
            )
        )
    return points


def analyze(
    dep: Deployment,
    *,
    batch: int = 1,
    context_tokens: int | None = None,
    input_len: int,
    output_len: int,
) -> ModelReport:
    """Everything `servelab model` shows for one deployment."""
    context = context_tokens if context_tokens is not None else input_len + output_len // 2
    single = decode_step(dep, 1, context)
    params = count_params(dep.model)
    return ModelReport(
        model=dep.model_name,
        family=dep.model.family,
        gpu=dep.gpu.slug,
        gpus=dep.gpus,
        layout=dep.layout.label,
        weights=dep.weights,
        kv_dtype=dep.kv_dtype.value,
        step_overhead_us=dep.step_overhead_us,
        input_len=input_len,
        output_len=output_len,
        params=params,
        weight_memory=weight_memory(dep),
        kv=kv_capacity(dep, input_len, output_len),
        single_stream_tokens_per_s=single.tokens_per_s,
        single_stream=single,
        kernel_floor=kernel_floor(dep, 1, context),
        step=decode_step(dep, batch, context),
        prefill=prefill(dep, input_len),
        throughput=throughput_curve(dep, input_len, output_len),
        calibration=list(replaced_figures(dep)),
        assumptions=_assumptions(dep),
    )


def _assumptions(dep: Deployment) -> list[str]:
    plan, comm = dep.weights, comm_model(dep.gpu, dep.calibration)
    notes = [
        f"weights {plan.name.value}: attention {plan.attention.value}, MLPs and experts "
        f"{plan.mlp.value}, embeddings/LM head/routers {plan.embeddings.value}",
        "memory and compute overlap perfectly; collectives do not overlap them",
        "experts are picked uniformly and independently by each token",
        f"per-step overhead {dep.step_overhead_us:g} us (CUDA-graph replay, sampling, scheduler)",
        f"links: {comm.link}, all-reduce latency {comm.allreduce_latency_s * US_PER_S:g} us",
        f"kernel floor: {dep.kernels.value} kernels (docs/MODEL.md), grouped expert GEMMs",
    ]
    if dep.model.mla is not None and dep.layout.tp > 1:
        notes.append("the MLA latent cache is replicated on every tensor-parallel rank")
    if dep.model.sparse_attention is not None:
        topk = dep.model.sparse_attention.index_topk
        notes.append(f"DSA: attention reads at most {topk} KV entries, the indexer all of them")
    if dep.calibration is None:
        notes.append("datasheet peaks, not measurements (--calibrate probe.json replaces them)")
    return notes
