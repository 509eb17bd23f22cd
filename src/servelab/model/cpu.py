"""The CPU ceiling: a model's decode step on a CPU, at the engine's thread count.

One model of the time, with the GPU's own arithmetic (`_costs`, `perf.step`): a decode
step reads its weights (the non-expert ones and the experts its tokens pick) and the KV
cache at the CPU's copy bandwidth, or multiplies at its matmul rate, whichever takes
longer: the roofline. A CPU runs each torch op on the thread that dispatched it, so every
op of the step adds its dispatch to the work instead of hiding behind it
(`kernels.op_floor_s(serial=True)`); the ops are the kernels transformers' forward
launches (`kernels.count_kernels`, unfused). There is no per-step engine allowance: what
the engine spends beyond the op floor is the gap `servelab diagnose` states.

The CPU stands in for a GPU in the shared arithmetic (`_device`): its copy bandwidth as
the memory bandwidth, its matmul rate in the model's dtype as the matmul rate, one
replica on one device, so no collective is ever asked about.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servelab.core.errors import ConfigError
from servelab.model.configs import ModelConfig
from servelab.model.cpus import CpuSpec
from servelab.model.deployment import Deployment
from servelab.model.formats import Format, KvDtype, WeightPlan, parse_kv_dtype, weight_plan
from servelab.model.gpus import GpuSpec
from servelab.model.kernels import KernelStyle, op_floor_s
from servelab.model.layout import Layout
from servelab.model.perf import kernel_counts, step
from servelab.model.presets import resolve_model
from servelab.model.results import CpuCeiling, CpuStep

__all__ = [
    "DEFAULT_CPU_BATCHES",
    "CpuDeployment",
    "cpu_assumptions",
    "cpu_ceiling",
    "cpu_deploy",
    "cpu_step",
]

DEFAULT_CPU_BATCHES = (1, 2, 4, 8, 16, 32, 64)


class CpuDeployment(BaseModel):
    """A model on a CPU: the shared arithmetic's deployment and the CPU it stands for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Deployment
    cpu: CpuSpec


def cpu_deploy(
    model: str | ModelConfig,
    cpu: CpuSpec,
    *,
    weights: str | None = None,
    kv_dtype: str | None = None,
) -> CpuDeployment:
    """`model` (a preset, a config.json path or a ModelConfig) on `cpu`; weights default to
    the preset's (else fp32), the KV cache to fp32 for fp32 weights, else bf16."""
    if isinstance(model, ModelConfig):
        config, name, preset_weights = model, model.family, None
    else:
        config, preset = resolve_model(model)
        name = preset.name if preset is not None else model
        preset_weights = preset.weights if preset is not None else None
    plan = weight_plan(weights or preset_weights or config.checkpoint_format or Format.FP32)
    default_kv = KvDtype.FP32 if plan.mlp == Format.FP32 else KvDtype.BF16
    kv = parse_kv_dtype(kv_dtype) if kv_dtype is not None else default_kv
    dep = Deployment(
        model_name=name,
        model=config,
        gpu=_device(cpu, plan, kv),
        layout=Layout(tp=1, pp=1, ep=1, dp=1),
        weights=plan,
        kv_dtype=kv,
        kernels=KernelStyle.UNFUSED,
        step_overhead_us=0.0,
        activation_reserve_bytes=0,
    )
    return CpuDeployment(deployment=dep, cpu=cpu)


def cpu_step(cd: CpuDeployment, batch: float, context_tokens: float) -> CpuStep:
    """One decode step of `batch` requests, each with `context_tokens` cached."""
    if batch <= 0:
        raise ConfigError(f"a decode step needs a batch above 0, got {batch:g}")
    breakdown = step(cd.deployment, decode_batch=batch, context_tokens=context_tokens)
    ops = kernel_counts(cd.deployment).per_step
    roofline = breakdown.gpu_busy_s
    per_op = cd.cpu.dispatch_us_per_op
    floor = op_floor_s(ops, per_op, roofline, serial=True) if per_op is not None else None
    return CpuStep(
        batch=batch,
        context_tokens=context_tokens,
        weight_bytes=breakdown.weight_bytes + breakdown.expert_bytes,
        kv_bytes=breakdown.kv_bytes,
        memory_s=breakdown.memory_s,
        flops=breakdown.flops,
        compute_s=breakdown.compute_s,
        roofline_s=roofline,
        bound="memory" if breakdown.memory_s >= breakdown.compute_s else "compute",
        ops=ops,
        dispatch_us_per_op=per_op,
        dispatch_s=floor - roofline if floor is not None else None,
        floor_s=floor,
        roofline_tokens_per_s=batch / roofline if roofline else 0.0,
        floor_tokens_per_s=batch / floor if floor else None,
    )


def cpu_ceiling(
    cd: CpuDeployment,
    *,
    input_len: int,
    output_len: int,
    batches: tuple[int, ...] = DEFAULT_CPU_BATCHES,
) -> CpuCeiling:
    """The single-stream ceiling and the decode step by batch at context input + output/2."""
    context = input_len + output_len / 2
    single = cpu_step(cd, 1, context)
    dep, cpu = cd.deployment, cd.cpu
    return CpuCeiling(
        model=dep.model_name,
        cpu=cpu,
        weights=dep.weights,
        kv_dtype=dep.kv_dtype.value,
        input_len=input_len,
        output_len=output_len,
        kernels=kernel_counts(dep),
        single_stream=single,
        single_stream_tokens_per_s=single.floor_tokens_per_s,
        throughput=[cpu_step(cd, b, context) for b in batches],
        assumptions=cpu_assumptions(cd),
    )


def cpu_assumptions(cd: CpuDeployment) -> list[str]:
    """What the CPU ceiling takes for granted, in the order a reader questions it."""
    cpu = cd.cpu
    notes = [
        f"{cpu.name} at {cpu.threads} torch threads: {cpu.source}",
        "weights and KV are read from memory at the copy bandwidth once per step; a working "
        "set that fits the last-level cache is read faster (a small model can beat this)",
        "memory and compute overlap perfectly within a step; experts are picked uniformly",
        "ops: transformers' unfused forward as counted on a GPU (docs/MODEL.md); its CPU "
        "path may dispatch more, so the op floor is a lower bound",
        "each op costs the probe's tiny-op dispatch on top of its work (one thread "
        "dispatches and runs it); no per-step engine allowance",
    ]
    if cpu.dispatch_us_per_op is None:
        notes.append("no op dispatch figure: the op floor is unknown, only the roofline stands")
    return notes


def _device(cpu: CpuSpec, plan: WeightPlan, kv: KvDtype) -> GpuSpec:
    """The CPU in the fields the shared arithmetic reads; one device, so no links are used."""
    formats = {plan.attention, plan.mlp, plan.embeddings, plan.router}
    needs_bf16 = kv != KvDtype.FP32 or bool(formats - {Format.FP32})
    if needs_bf16 and cpu.bf16_flops is None:
        raise ConfigError(
            f"{plan.name.value} weights or a {kv.value} KV cache on the CPU need its bf16 "
            "matmul rate, which was not measured",
            hint="servelab probe --comm measures it",
        )
    return GpuSpec(
        slug="cpu",
        name=f"{cpu.name}, {cpu.threads} threads",
        nvml_names=(),
        memory_bytes=cpu.memory_bytes or 0,
        memory_bandwidth_bytes_s=cpu.memory_bandwidth_bytes_s,
        # Read only when the plan or the cache is not fp32, which needs the measured rate.
        bf16_dense_flops=cpu.bf16_flops or cpu.fp32_flops,
        fp8_dense_flops=None,
        fp4_dense_flops=None,
        fp32_flops=cpu.fp32_flops,
        power_limit_w=0.0,
        nvlink_bandwidth_bytes_s=None,
        pcie_gen=1,
        pcie_width=1,
        assumed=("a CPU in a GPU's fields: no links, power or NVML names",),
        kernel_latency_source=cpu.source,
    )
