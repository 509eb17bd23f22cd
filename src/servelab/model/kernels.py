"""Kernels per decode step, by layer kind, and the kernel floor they set.

A small model's decode step is many small kernels, each far below the memory-bound time
`perf` counts; then a step cannot be faster than its kernel count times what one kernel
costs to start. Two implementations are counted (docs/MODEL.md says where each number
comes from): `unfused`, PyTorch modules run op by op as transformers does (counted with
torch's profiler on an H200), and `fused`, the custom kernels SGLang and vLLM launch
(counted from their forward code). The counts do not grow with the batch: attention
runs one kernel for the whole batch and the experts are grouped GEMMs.

The floor of a step is `max(GPU work, kernels x per-kernel latency) + the per-step
allowance`, with the per-kernel latency of CUDA-graph replay or of eager dispatch
(`GpuSpec.graph_kernel_us`, `eager_kernel_us`, or a probe's measurement). On a CPU the
thread that dispatches an op also runs it, so nothing overlaps: the floor is the work
plus the ops' dispatch (`op_floor_s(..., serial=True)`, `servelab.model.cpu`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from servelab.core.units import US_PER_S
from servelab.model.configs import ModelConfig
from servelab.model.layout import Layout
from servelab.model.results import KernelCounts, KernelFloor, StepBreakdown

__all__ = [
    "KERNEL_TABLES",
    "KernelStyle",
    "KernelTable",
    "count_kernels",
    "floor_of_step",
    "op_floor_s",
]


class KernelStyle(StrEnum):
    """How a serving engine's forward pass turns into kernels."""

    FUSED = "fused"
    """SGLang and vLLM: fused residual-add + norm, merged QKV and gate-up GEMMs, fused MoE."""
    UNFUSED = "unfused"
    """transformers: every PyTorch op of the modules is its own kernel."""


@dataclass(frozen=True)
class KernelTable:
    """Kernels one decode step launches for each part of the model, in one style."""

    norm: int
    """One RMSNorm (fused: with the residual add before it)."""
    gqa: int
    """GQA attention beside its norm: projections, RoPE, KV-cache write, attention, output."""
    qk_norm: int
    """Per-head Q and K norms (Qwen3)."""
    mla: int
    """MLA attention beside its norm, with a Q rank (without one: `mla_no_q_rank`)."""
    mla_no_q_rank: int
    dsa_indexer: int
    """DeepSeek sparse attention's indexer: its projections, scores and top-k."""
    dense_mlp: int
    """A SwiGLU MLP beside its norm: gate, up, activation, multiply, down."""
    router: int
    """Router GEMM, softmax, top-k, renormalisation."""
    dispatch: int
    """Sorting tokens by expert and setting up the grouped GEMMs."""
    expert_gemms: int
    """The experts' gate-up and down GEMMs, grouped over all experts."""
    activation: int
    combine: int
    """Routing weights, the inverse permutation and the sum over each token's experts."""
    shared_experts: int
    shared_gate: int
    """The sigmoid gate on a shared expert (Qwen2-MoE)."""
    residual: int
    """A residual add (fused into the next norm: 0)."""
    embedding: int
    other: int
    """Per step outside the layers: positions, masks, RoPE tables, batch metadata."""
    lm_head: int
    sampling: int


KERNEL_TABLES: dict[KernelStyle, KernelTable] = {
    # torch.profiler on one H200, 2026-12-01: transformers 5.24's Qwen3-MoE (h200-ref,
    # sdpa, grouped_mm experts, StaticCache), one decode step at batch 1 with softmax +
    # multinomial sampling: 1,482 kernels, 90 per layer (attention 49 with its norm, the
    # MoE block 41 with its norm), 42 outside the layers. MLA, DSA and shared experts are
    # counted from transformers' modules op by op, not profiled.
    KernelStyle.UNFUSED: KernelTable(
        norm=8,  # to float32, pow, mean, add eps, rsqrt, mul, to bf16, mul weight
        gqa=25,  # q, k, v, o GEMMs 4; RoPE 10; KV-cache write and SDPA 10; residual 1
        qk_norm=16,  # two RMSNorms
        mla=46,  # q_a, q_b, kv_a, kv_b, o GEMMs 5; q_a and kv_a norms 16; splits and cats 4;
        # RoPE 10; KV-cache write and SDPA 10; residual 1
        mla_no_q_rank=37,  # without q_a and its norm
        dsa_indexer=25,  # 3 GEMMs, LayerNorm 5, RoPE 10, scores 4, top-k 2, cache write 1
        dense_mlp=5,  # gate, up, SiLU, multiply, down
        router=8,  # GEMM, cast, softmax, top-k 2, sum, divide, cast
        dispatch=14,  # sort, gathers, histogram, cumsum 2, copies 3, grouped-GEMM set-up 2
        expert_gemms=2,  # torch grouped_mm: gate-up, down
        activation=2,  # SiLU, multiply
        combine=6,  # routing weights, inverse permutation 3, sum, cast
        shared_experts=6,  # gate, up, SiLU, multiply, down, add to the routed output
        shared_gate=3,  # GEMM, sigmoid, multiply
        residual=1,
        embedding=1,
        other=16,  # positions and masks 7, RoPE cos/sin tables 9
        lm_head=1,
        sampling=16,  # softmax over fp32 logits, multinomial (with its checks)
    ),
    # From SGLang's and vLLM's forward code (python/sglang/srt/models, vllm/model_executor/
    # models): each custom op launches one kernel. Not profiled.
    KernelStyle.FUSED: KernelTable(
        norm=1,  # fused_add_rms_norm: the residual add rides in the norm
        gqa=5,  # merged QKV GEMM, rotary, KV-cache write, attention, o-proj
        qk_norm=2,  # q_norm, k_norm
        mla=11,  # fused q_a+kv_a GEMM, q_a and kv_a norms, q_b, W_UK bmm, rotary, cache
        # write, attention (split-KV and combine: 2), W_UV bmm, o-proj
        mla_no_q_rank=10,  # no q_a norm; one Q projection
        dsa_indexer=10,  # 3 GEMMs, k norm, rotary, fp8 quantisation 2, logits, top-k, cache
        dense_mlp=3,  # merged gate-up GEMM, silu_and_mul, down
        router=2,  # router GEMM, topk_softmax (top-k, softmax and renormalisation fused)
        dispatch=1,  # moe_align_block_size
        expert_gemms=2,  # fused_moe: w13, w2
        activation=1,  # silu_and_mul
        combine=1,  # moe_sum
        shared_experts=4,  # gate-up GEMM, silu_and_mul, down, add
        shared_gate=2,  # GEMM, sigmoid-multiply
        residual=0,
        embedding=1,
        other=2,  # positions and the KV slot mapping
        lm_head=1,
        sampling=4,  # temperature, softmax, top-k/top-p sampling, the chosen ids
    ),
}


def count_kernels(config: ModelConfig, layout: Layout, style: KernelStyle) -> KernelCounts:
    """Kernels along one decode step's critical path (every pipeline stage, one replica)."""
    t = KERNEL_TABLES[style]
    moe = len(config.moe_layers)
    dense = config.layers - moe
    if config.mla is not None:
        mla = t.mla if config.mla.q_lora_rank is not None else t.mla_no_q_rank
        per_attention = mla + (t.dsa_indexer if config.sparse_attention is not None else 0)
    else:
        per_attention = t.gqa + (t.qk_norm if config.qk_norm else 0)
    per_moe = t.router + t.dispatch + t.expert_gemms + t.activation + t.combine
    per_shared = 0
    if config.shared_intermediate:
        per_shared = t.shared_experts + (t.shared_gate if config.shared_expert_gate else 0)
    collectives = 0
    if layout.tp > 1:  # as perf counts them: 2 per layer, the embedding's, the logits' gather
        collectives += 2 * config.layers + 2
    if layout.ep > 1:
        collectives += 2 * moe  # dispatch and combine all-to-alls
    collectives += layout.pp - 1  # one activation send per stage boundary
    parts = {
        "attention": config.layers * (t.norm + per_attention),
        "dense_mlp": dense * (t.norm + t.dense_mlp + t.residual),
        "moe": moe * (t.norm + per_moe + t.residual),
        "shared_experts": moe * per_shared,
        "embedding": t.embedding,
        "other": t.other,
        "final_norm": t.norm,
        "lm_head": t.lm_head,
        "sampling": t.sampling,
        "collectives": collectives,
    }
    return KernelCounts(style=style.value, **parts, per_step=sum(parts.values()))


def floor_of_step(
    counts: KernelCounts,
    step: StepBreakdown,
    *,
    eager_kernel_us: float,
    graph_kernel_us: float,
    source: str,
) -> KernelFloor:
    """The floor of `step`: its GPU work (busy and communication) or its kernels' latency,
    whichever is longer, plus the same per-step allowance as the roofline."""
    work = step.gpu_busy_s + step.communication_s
    graph = op_floor_s(counts.per_step, graph_kernel_us, work, step.overhead_s)
    eager = op_floor_s(counts.per_step, eager_kernel_us, work, step.overhead_s)
    return KernelFloor(
        kernels=counts,
        eager_us_per_kernel=eager_kernel_us,
        graph_us_per_kernel=graph_kernel_us,
        gpu_work_s=work,
        overhead_s=step.overhead_s,
        graph_floor_s=graph,
        eager_floor_s=eager,
        graph_tokens_per_s=step.batch / graph if step.batch else 0.0,
        eager_tokens_per_s=step.batch / eager if step.batch else 0.0,
        source=source,
    )


def op_floor_s(
    ops: int, us_per_op: float, work_s: float, overhead_s: float = 0.0, *, serial: bool = False
) -> float:
    """A step of `ops` kernels (or CPU ops) costing `us_per_op` each to start, doing `work_s`.

    On a GPU the host launches ahead of the device, so the longer of the two counts; on a
    CPU (`serial`) each op's dispatch and its work follow one another on one thread.
    """
    launches = ops * us_per_op / US_PER_S
    return (work_s + launches if serial else max(work_s, launches)) + overhead_s
