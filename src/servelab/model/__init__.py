"""Hardware and model catalogues and the analytic performance model: pure data and arithmetic.

Nothing here touches the machine; `probe` measures it and compares with these figures.
A deployment (`deploy`) is a model on GPUs in a layout with its formats; `analyze` gives
its ceilings, `kernel_floor` what its kernels' count and latency allow, and
`decode_step_s`, `prefill_s`, `step_s` and `kv_capacity_tokens` are the simulator's
per-step questions. On a CPU (`cpu_deploy`, a `CpuSpec` measured by the probe or from a
datasheet), `cpu_ceiling` gives the same roofline with the ops' dispatch added.
"""

from servelab.model.analysis import analyze, throughput_curve
from servelab.model.calibration import Calibration, calibration_from_probe
from servelab.model.configs import SUPPORTED_FAMILIES, ModelConfig, load_config
from servelab.model.cpu import CpuDeployment, cpu_ceiling, cpu_deploy, cpu_step
from servelab.model.cpus import CpuSpec, cpu_from_probe, datasheet_cpu
from servelab.model.deployment import (
    DEFAULT_ACTIVATION_RESERVE_BYTES,
    DEFAULT_MEM_FRACTION,
    DEFAULT_STEP_OVERHEAD_US,
    Deployment,
)
from servelab.model.formats import Format, KvDtype, WeightPlan, weight_plan
from servelab.model.gpus import GPUS, GpuSpec, gpu_by_slug
from servelab.model.kernels import KernelStyle, count_kernels
from servelab.model.layout import Layout, parse_layout
from servelab.model.params import ParamCounts, count_params
from servelab.model.perf import (
    decode_step,
    decode_step_s,
    deploy,
    kernel_counts,
    kernel_floor,
    kv_capacity,
    kv_capacity_tokens,
    prefill,
    prefill_s,
    step,
    step_s,
    weight_memory,
)
from servelab.model.presets import MODEL_PRESETS, ModelPreset, resolve_model
from servelab.model.results import (
    CpuCeiling,
    CpuStep,
    KernelCounts,
    KernelFloor,
    KvCapacity,
    ModelComparison,
    ModelReport,
    StepBreakdown,
    ThroughputPoint,
    WeightMemory,
)

__all__ = [
    "DEFAULT_ACTIVATION_RESERVE_BYTES",
    "DEFAULT_MEM_FRACTION",
    "DEFAULT_STEP_OVERHEAD_US",
    "GPUS",
    "MODEL_PRESETS",
    "SUPPORTED_FAMILIES",
    "Calibration",
    "CpuCeiling",
    "CpuDeployment",
    "CpuSpec",
    "CpuStep",
    "Deployment",
    "Format",
    "GpuSpec",
    "KernelCounts",
    "KernelFloor",
    "KernelStyle",
    "KvCapacity",
    "KvDtype",
    "Layout",
    "ModelComparison",
    "ModelConfig",
    "ModelPreset",
    "ModelReport",
    "ParamCounts",
    "StepBreakdown",
    "ThroughputPoint",
    "WeightMemory",
    "WeightPlan",
    "analyze",
    "calibration_from_probe",
    "count_kernels",
    "count_params",
    "cpu_ceiling",
    "cpu_deploy",
    "cpu_from_probe",
    "cpu_step",
    "datasheet_cpu",
    "decode_step",
    "decode_step_s",
    "deploy",
    "gpu_by_slug",
    "kernel_counts",
    "kernel_floor",
    "kv_capacity",
    "kv_capacity_tokens",
    "load_config",
    "parse_layout",
    "prefill",
    "prefill_s",
    "resolve_model",
    "step",
    "step_s",
    "throughput_curve",
    "weight_memory",
    "weight_plan",
]
