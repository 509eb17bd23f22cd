"""A deployment: a model on some GPUs in a layout, with its formats and engine allowances.

The defaults, and why:

- `DEFAULT_STEP_OVERHEAD_US` = 100 us per decode step: a CUDA-graph replay launch
  (~10 us), sampling over a 150k vocabulary (~30 us of softmax/top-p kernels), and the
  part of the engine's scheduler and output processing that does not overlap the GPU
  (~50-60 us with SGLang's and vLLM's overlapped schedulers). It is an allowance for the
  best engines; an engine without CUDA graphs or an overlapped scheduler spends more.
- `DEFAULT_MEM_FRACTION` = 0.9: SGLang's and vLLM's usual static memory fraction.
- `DEFAULT_ACTIVATION_RESERVE_BYTES` = 2 GiB per GPU, taken out of that fraction: CUDA
  graph pools, NCCL buffers and one chunked-prefill step's activations (8,192 tokens x
  a 6,144-wide hidden state x 2 bytes x ~10 live tensors is about 1 GB).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.units import GIB, US_PER_S
from servelab.model.calibration import Calibration, Replacement, apply_calibration
from servelab.model.comm import CommModel, comm_model
from servelab.model.configs import ModelConfig
from servelab.model.formats import KvDtype, WeightPlan
from servelab.model.gpus import GpuSpec
from servelab.model.kernels import KernelStyle
from servelab.model.layout import Layout

__all__ = [
    "DEFAULT_ACTIVATION_RESERVE_BYTES",
    "DEFAULT_MEM_FRACTION",
    "DEFAULT_STEP_OVERHEAD_US",
    "Deployment",
    "replaced_figures",
]

DEFAULT_STEP_OVERHEAD_US = 100.0
DEFAULT_MEM_FRACTION = 0.9
DEFAULT_ACTIVATION_RESERVE_BYTES = 2 * GIB


class Deployment(BaseModel):
    """Everything the performance model needs; build one with `servelab.model.perf.deploy`.

    Pure data: what is derived from it (calibrated figures, per-GPU costs) is computed by
    `servelab.model.perf`, so a `model_copy(update=...)` never carries stale values.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_name: str = Field(description="Preset name or config path, for display.")
    model: ModelConfig
    gpu: GpuSpec = Field(description="The catalogue entry (datasheet figures).")
    layout: Layout
    weights: WeightPlan
    kv_dtype: KvDtype = KvDtype.BF16
    kernels: KernelStyle = Field(
        default=KernelStyle.FUSED, description="Whose kernels the kernel floor counts."
    )
    step_overhead_us: float = Field(default=DEFAULT_STEP_OVERHEAD_US, ge=0)
    mem_fraction: float = Field(default=DEFAULT_MEM_FRACTION, gt=0, le=1)
    activation_reserve_bytes: int = Field(default=DEFAULT_ACTIVATION_RESERVE_BYTES, ge=0)
    calibration: Calibration | None = None

    @property
    def gpus(self) -> int:
        return self.layout.gpus


def replaced_figures(dep: Deployment) -> tuple[Replacement, ...]:
    """Each datasheet figure (GPU and links) that `dep`'s calibration replaced."""
    gpu_part = apply_calibration(dep.gpu, dep.calibration)[1]
    links = _link_replacements(comm_model(dep.gpu), comm_model(dep.gpu, dep.calibration))
    return gpu_part + links


def _link_replacements(datasheet: CommModel, calibrated: CommModel) -> tuple[Replacement, ...]:
    out: list[Replacement] = []
    pairs = (
        ("GPU-to-GPU link bandwidth", "GB/s", 1e9, "link_bandwidth_bytes_s"),
        ("all-reduce bus bandwidth", "GB/s", 1e9, "allreduce_busbw_bytes_s"),
        ("all-reduce latency", "us", 1 / US_PER_S, "allreduce_latency_s"),
        ("send latency", "us", 1 / US_PER_S, "send_latency_s"),
    )
    for name, unit, scale, field in pairs:
        old, new = getattr(datasheet, field), getattr(calibrated, field)
        if old != new:
            out.append(
                Replacement(
                    name=name,
                    unit=unit,
                    datasheet=old / scale,
                    calibrated=new / scale,
                    how="measured",
                )
            )
    if calibrated.measured_allreduce:
        sizes = len(calibrated.measured_allreduce)
        out.append(
            Replacement(
                name=f"all-reduce time by size ({calibrated.measured_world_size} ranks)",
                unit="sizes",
                datasheet=None,
                calibrated=float(sizes),
                how="measured sweep, interpolated (used when tp equals its rank count)",
            )
        )
    return tuple(out)
