"""What the performance model returns: pydantic results with the unit in every numeric name.

Bytes and FLOPs are per GPU unless the name says otherwise; times are seconds. Each
field's formula is in docs/MODEL.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.model.calibration import Replacement
from servelab.model.cpus import CpuSpec
from servelab.model.formats import WeightPlan
from servelab.model.params import ParamCounts

__all__ = [
    "MODEL_SCHEMA",
    "Bound",
    "CpuCeiling",
    "CpuStep",
    "KernelCounts",
    "KernelFloor",
    "KvCapacity",
    "ModelComparison",
    "ModelReport",
    "StepBreakdown",
    "ThroughputPoint",
    "WeightMemory",
]

MODEL_SCHEMA = "servelab.model/1"

Bound = Literal["memory", "compute", "communication", "overhead"]


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WeightMemory(_Result):
    """Weights held by one GPU of the heaviest pipeline stage, by component."""

    embeddings_bytes: float
    attention_bytes: float
    dense_mlp_bytes: float
    experts_bytes: float = Field(description="Routed experts: all of them, not only the active.")
    shared_experts_bytes: float
    router_and_norms_bytes: float
    lm_head_bytes: float
    per_gpu_bytes: float = Field(description="The sum: what must fit beside the KV cache.")
    model_bytes: float = Field(description="One copy of the whole model in its formats.")


class KvCapacity(_Result):
    """The KV cache: its cost per token, the room left for it, and what that room holds."""

    kv_bytes_per_token: float = Field(
        description="One token's cache over all layers, one copy (GQA: 2 kv_heads head_dim; "
        "MLA: kv_lora_rank + rope dim; DSA adds the indexer key), all GPUs together."
    )
    kv_bytes_per_token_per_gpu: float = Field(
        description="What one token costs on one GPU of the heaviest stage: GQA heads are "
        "sharded by tp, an MLA latent is replicated on every tp rank."
    )
    usable_bytes_per_gpu: float = Field(description="Memory x mem_fraction.")
    weights_bytes_per_gpu: float
    activation_reserve_bytes: float
    kv_pool_bytes_per_gpu: float = Field(description="usable - weights - activation reserve.")
    capacity_tokens: int = Field(description="Tokens the whole deployment can cache (all dp).")
    tokens_per_request: int = Field(description="input + output length.")
    max_concurrency: int = Field(description="capacity_tokens // tokens_per_request.")


class StepBreakdown(_Result):
    """One forward pass along its critical path, per GPU; step_s is the sum of the parts."""

    batch: float = Field(description="Requests decoding in the step (all dp replicas).")
    context_tokens: float = Field(description="KV entries each decoding request has (mean).")
    prefill_tokens: float = Field(description="New prompt tokens in the step (all replicas).")
    weight_bytes: float = Field(description="Non-expert weights read (LM head included).")
    expert_bytes: float = Field(description="Routed-expert weights read: expected distinct ones.")
    kv_bytes: float = Field(description="KV cache read.")
    memory_s: float = Field(description="(weights + experts + KV) / memory bandwidth.")
    flops: float
    compute_s: float = Field(description="FLOPs over the rate of each matmul's format.")
    gpu_busy_s: float = Field(description="max(memory_s, compute_s), summed along the path.")
    allreduce_s: float
    allreduces: int = Field(description="Tensor-parallel all-reduces along the path.")
    alltoall_s: float = Field(description="Expert-parallel dispatch and combine.")
    pp_send_s: float = Field(description="Activations sent between pipeline stages.")
    communication_s: float
    pp_bubble_fraction: float = Field(description="Share of stage time idle (batch < pp).")
    overhead_s: float = Field(description="The per-step engine allowance.")
    step_s: float = Field(description="gpu_busy_s + communication_s + overhead_s.")
    distinct_experts_per_layer: float = Field(
        description="Expected experts a MoE layer runs: E (1 - (1 - k/E)^tokens)."
    )
    bound: Bound = Field(description="The largest term of step_s (busy: memory or compute).")
    tokens_per_s: float = Field(description="Decode: batch / step_s; prefill: tokens / step_s.")


class KernelCounts(_Result):
    """Kernels one decode step launches along its critical path, by part (docs/MODEL.md)."""

    style: str = Field(description="'unfused' (transformers, op by op) or 'fused' (SGLang, vLLM).")
    attention: int = Field(description="Every layer's attention block with its input norm.")
    dense_mlp: int = Field(description="Dense MLP layers, with their norm and residual add.")
    moe: int = Field(
        description="MoE layers: norm, router, dispatch, expert GEMMs, activation, combine."
    )
    shared_experts: int
    embedding: int
    other: int = Field(description="Positions, masks, RoPE tables, batch metadata.")
    final_norm: int
    lm_head: int
    sampling: int
    collectives: int = Field(
        description="Tensor-parallel all-reduces and gather, all-to-alls, pipeline sends."
    )
    per_step: int = Field(description="The sum.")


class KernelFloor(_Result):
    """A decode step as its kernels bound it: no faster than their count times their latency."""

    kernels: KernelCounts
    eager_us_per_kernel: float = Field(description="One op dispatched from Python (no graphs).")
    graph_us_per_kernel: float = Field(description="One kernel of a replayed CUDA graph.")
    gpu_work_s: float = Field(description="The roofline's GPU busy time plus communication.")
    overhead_s: float = Field(description="The per-step allowance, as in the roofline.")
    graph_floor_s: float = Field(
        description="max(gpu_work_s, kernels x graph_us_per_kernel) + overhead_s."
    )
    eager_floor_s: float = Field(
        description="max(gpu_work_s, kernels x eager_us_per_kernel) + overhead_s."
    )
    graph_tokens_per_s: float = Field(description="batch / graph_floor_s.")
    eager_tokens_per_s: float = Field(description="batch / eager_floor_s.")
    source: str = Field(description="Where the per-kernel latencies come from.")


class ThroughputPoint(_Result):
    """Closed-loop steady state at one concurrency: each request prefills, then decodes."""

    concurrency: int
    tpot_ms: float = Field(description="Decode step at the mean context, input + output/2.")
    prefill_s: float = Field(description="Prefill of every request's input, once per cycle.")
    output_tokens_per_s: float = Field(
        description="concurrency x output / (output x step + prefill of the batch)."
    )
    total_tokens_per_s: float = Field(description="Input and output tokens over the same time.")
    bound: Bound


class ModelReport(_Result):
    """`servelab model`'s document: one deployment's ceilings and where the time goes."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=MODEL_SCHEMA, alias="schema")
    model: str
    family: str
    gpu: str
    gpus: int
    layout: str
    weights: WeightPlan
    kv_dtype: str
    step_overhead_us: float
    input_len: int
    output_len: int
    params: ParamCounts
    weight_memory: WeightMemory
    kv: KvCapacity
    single_stream_tokens_per_s: float = Field(description="1 / decode step at batch 1.")
    single_stream: StepBreakdown
    kernel_floor: KernelFloor = Field(description="The single-stream step's kernel floor.")
    step: StepBreakdown = Field(description="The decode step at the asked batch and context.")
    prefill: StepBreakdown = Field(description="One request's prefill of input_len tokens.")
    throughput: list[ThroughputPoint]
    calibration: list[Replacement] = Field(description="Datasheet figures measurements replaced.")
    assumptions: list[str]


class ModelComparison(_Result):
    """Several layouts of one model side by side (`--compare`)."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=MODEL_SCHEMA, alias="schema")
    reports: list[ModelReport]


class CpuStep(_Result):
    """One decode step on a CPU: its roofline, and the op floor of dispatching its ops."""

    batch: float = Field(description="Requests decoding in the step.")
    context_tokens: float = Field(description="KV entries each request has (mean).")
    weight_bytes: float = Field(description="Weights read: non-expert ones and distinct experts.")
    kv_bytes: float = Field(description="KV cache read.")
    memory_s: float = Field(description="(weight_bytes + kv_bytes) / the CPU's copy bandwidth.")
    flops: float
    compute_s: float = Field(description="FLOPs / the CPU's matmul rate in the model's dtype.")
    roofline_s: float = Field(description="max(memory_s, compute_s): no op costs anything else.")
    bound: Literal["memory", "compute"]
    ops: int = Field(description="torch ops one step dispatches (the unfused kernel count).")
    dispatch_us_per_op: float | None = Field(description="The probe's eager op on this CPU.")
    dispatch_s: float | None = Field(description="ops x dispatch_us_per_op; None: unknown.")
    floor_s: float | None = Field(
        description="roofline_s + dispatch_s: the thread that dispatches an op also runs it."
    )
    roofline_tokens_per_s: float = Field(description="batch / roofline_s.")
    floor_tokens_per_s: float | None = Field(description="batch / floor_s.")


class CpuCeiling(_Result):
    """A model on a CPU at one thread count: the single-stream ceiling and decode by batch."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=MODEL_SCHEMA, alias="schema")
    model: str
    cpu: CpuSpec
    weights: WeightPlan
    kv_dtype: str
    input_len: int
    output_len: int
    kernels: KernelCounts
    single_stream: CpuStep = Field(description="Decode at batch 1, context input + output/2.")
    single_stream_tokens_per_s: float | None = Field(
        description="1 / the single-stream floor; None without the CPU's op dispatch."
    )
    throughput: list[CpuStep] = Field(description="Decode steps by batch, same context.")
    assumptions: list[str]
