"""The GPU catalogue: datasheet figures that measurements are compared with.

Every figure is NVIDIA's, from the datasheet named beside it. Tensor-core rates are
*dense* (NVIDIA's headline figures assume 2:4 sparsity and are twice these). Memory
sizes are the datasheet's "GB" read as GiB (2^30 bytes), which is how the DRAM is
built; NVML reports a little less, the part the driver reserves. A figure that is
derived rather than printed in a datasheet is listed in `GpuSpec.assumed`.

No datasheet gives the per-kernel latencies of the kernel floor (`servelab.model.kernels`):
they are measured, on the H200, and `kernel_latency_source` says how and where.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.core.units import GIB

__all__ = [
    "EAGER_KERNEL_US",
    "GPUS",
    "GRAPH_EMPTY_KERNEL_US",
    "GRAPH_KERNEL_US",
    "KERNEL_LATENCY_ASSUMED",
    "GpuSpec",
    "UnknownGpuError",
    "gpu_by_slug",
    "gpu_for_nvml_name",
    "pcie_bandwidth_bytes_s",
]

_TB = 1e12
_GB = 1e9
_TFLOPS = 1e12

# PCIe data rate per lane and direction after line encoding, in bytes/s: transfer rate
# (GT/s) x encoding efficiency / 8. Gen1-2 use 8b/10b, gen3-5 128b/130b, gen6 FLIT mode
# (242 payload bytes in 256). PCI-SIG base specifications 1.0-6.0.
_PCIE_LANE_BYTES_S: dict[int, float] = {
    1: 2.5e9 * 8 / 10 / 8,
    2: 5.0e9 * 8 / 10 / 8,
    3: 8.0e9 * 128 / 130 / 8,  # 0.985 GB/s
    4: 16.0e9 * 128 / 130 / 8,  # 1.969 GB/s
    5: 32.0e9 * 128 / 130 / 8,  # 3.938 GB/s
    6: 64.0e9 * 242 / 256 / 8,  # 7.563 GB/s
}


EAGER_KERNEL_US = 7.0
"""One op dispatched eagerly from Python through torch to the driver: `servelab probe
--comm`'s launch chain (1,000 in-place adds on 1,024 floats) on one H200 with torch 2.11,
2026-12-01: 7.0, 7.1 and 7.0 us in three runs, 10.7 us inside a whole `probe --comm
--quick`. The host's cost more than the GPU's; a floor: transformers' modules spend
20-29 us of host time per kernel (h200-ref eager, 29.5 ms for 1,482 kernels)."""
GRAPH_KERNEL_US = 2.8
"""One kernel of a decode step replayed as a CUDA graph on one H200: h200-ref's graph
step took 3.9-4.1 ms for 1,436 kernels (plain torch, 2026-12-01), each kernel ~2.4 us
busy and ~0.4 us between them. The launch chain's empty adds replay at 1.0 us: a decode
step's kernels (norms, GEMVs, reductions) are not empty."""
GRAPH_EMPTY_KERNEL_US = 1.0
"""The launch chain's empty adds replayed as a CUDA graph on the same H200: 1.01 us per
kernel. A probe's own chain is read against it (`calibration.apply_calibration`)."""
KERNEL_LATENCY_ASSUMED = (
    "assumed: the H200's measured launch (7.0 us eager) and replay (2.8 us) per kernel; "
    "launch is the host's and the driver's cost more than the GPU's"
)


class GpuSpec(BaseModel):
    """One GPU model's datasheet figures, in SI units (bytes, bytes/s, FLOP/s, watts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slug: str = Field(description="Short stable name, e.g. 'h200'.")
    name: str = Field(description="The product as NVIDIA names it.")
    nvml_names: tuple[str, ...] = Field(
        description="Substrings of the name NVML reports that identify this product."
    )
    nvml_excludes: tuple[str, ...] = Field(
        default=(),
        description="Substrings that mean a sibling product with other figures (e.g. 'NVL').",
    )
    memory_bytes: int = Field(description="Device memory, the datasheet's GB read as GiB.")
    memory_bandwidth_bytes_s: float = Field(description="Peak DRAM bandwidth.")
    bf16_dense_flops: float = Field(description="Peak dense BF16 tensor rate, FLOP/s.")
    fp8_dense_flops: float | None = Field(description="Peak dense FP8 rate; None: no FP8.")
    fp4_dense_flops: float | None = Field(description="Peak dense FP4 rate; None: no FP4.")
    fp32_flops: float | None = Field(
        default=None,
        description="FP32 matmul rate; None for the GPUs (the catalogue models them in "
        "bf16 and lower), set for a CPU (`servelab.model.cpus`).",
    )
    power_limit_w: float = Field(description="Maximum board power (TDP) in watts.")
    nvlink_bandwidth_bytes_s: float | None = Field(
        description=(
            "NVLink bandwidth per GPU, both directions added together as NVIDIA quotes it "
            "(H100's 900 GB/s is 450 GB/s each way); None: no NVLink."
        )
    )
    pcie_gen: int = Field(description="PCIe generation of the host link.")
    pcie_width: int = Field(description="PCIe lanes of the host link.")
    assumed: tuple[str, ...] = Field(
        default=(), description="Fields whose figure is derived, not printed in a datasheet."
    )
    eager_kernel_us: float = Field(
        default=EAGER_KERNEL_US, gt=0, description="One op dispatched eagerly (no graphs)."
    )
    graph_kernel_us: float = Field(
        default=GRAPH_KERNEL_US, gt=0, description="One decode kernel of a replayed graph."
    )
    kernel_latency_source: str = Field(
        default=KERNEL_LATENCY_ASSUMED, description="Where the per-kernel latencies come from."
    )

    @property
    def pcie_bandwidth_bytes_s(self) -> float:
        """Host-link bandwidth per direction, after encoding."""
        return pcie_bandwidth_bytes_s(self.pcie_gen, self.pcie_width)


class UnknownGpuError(ConfigError, KeyError):
    """A slug that is not in the catalogue; the message lists the valid ones."""

    def __str__(self) -> str:
        # KeyError would print the message quoted, as a repr.
        return Exception.__str__(self)


GPUS: dict[str, GpuSpec] = {
    spec.slug: spec
    for spec in (
        # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: 80 GB HBM3, 3.35 TB/s,
        # BF16 1,979 and FP8 3,958 TFLOPS with sparsity, up to 700 W, NVLink 900 GB/s,
        # PCIe Gen5 128 GB/s (both directions).
        GpuSpec(
            slug="h100",
            name="NVIDIA H100 SXM5 80GB",
            nvml_names=("H100 80GB HBM3", "H100 SXM"),
            memory_bytes=80 * GIB,
            memory_bandwidth_bytes_s=3.35 * _TB,
            bf16_dense_flops=989.5 * _TFLOPS,
            fp8_dense_flops=1979 * _TFLOPS,
            fp4_dense_flops=None,
            power_limit_w=700,
            nvlink_bandwidth_bytes_s=900 * _GB,
            pcie_gen=5,
            pcie_width=16,
            kernel_latency_source=(
                "the H200's, measured (the same GH100 chip at the same 1,980 MHz boost clock)"
            ),
        ),
        # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: 141 GB HBM3e, 4.8 TB/s,
        # BF16 1,979 and FP8 3,958 TFLOPS with sparsity, up to 700 W, NVLink 900 GB/s,
        # PCIe Gen5 128 GB/s. The H200 NVL (a 600 W PCIe card) has other figures.
        GpuSpec(
            slug="h200",
            name="NVIDIA H200 SXM 141GB",
            nvml_names=("H200",),
            nvml_excludes=("NVL",),
            memory_bytes=141 * GIB,
            memory_bandwidth_bytes_s=4.8 * _TB,
            bf16_dense_flops=989.5 * _TFLOPS,
            fp8_dense_flops=1979 * _TFLOPS,
            fp4_dense_flops=None,
            power_limit_w=700,
            nvlink_bandwidth_bytes_s=900 * _GB,
            pcie_gen=5,
            pcie_width=16,
            kernel_latency_source=(
                "measured on one H200, 2026-12-01: 7.0 us eager (servelab probe --comm's "
                "launch chain), 2.8 us replayed (h200-ref's decode step as a CUDA graph, "
                "3.9-4.1 ms for 1,436 kernels)"
            ),
        ),
        # NVIDIA HGX B200 (Blackwell datasheet, per GPU): 180 GB HBM3e (DGX B200: 1,440 GB
        # for 8), 8 TB/s, dense BF16 2.25, FP8 4.5, FP4 9 PFLOPS (18 with sparsity),
        # 1,000 W, NVLink 1.8 TB/s, PCIe Gen6 256 GB/s (both directions). The GB200
        # superchip's GPUs run at other limits.
        GpuSpec(
            slug="b200",
            name="NVIDIA B200 180GB",
            nvml_names=("B200",),
            nvml_excludes=("GB200",),
            memory_bytes=180 * GIB,
            memory_bandwidth_bytes_s=8 * _TB,
            bf16_dense_flops=2250 * _TFLOPS,
            fp8_dense_flops=4500 * _TFLOPS,
            fp4_dense_flops=9000 * _TFLOPS,
            power_limit_w=1000,
            nvlink_bandwidth_bytes_s=1800 * _GB,
            pcie_gen=6,
            pcie_width=16,
        ),
        # NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 96 GB GDDR7 with ECC,
        # 1.6 TB/s, up to 600 W, PCIe Gen5 x16, no NVLink, "4 PFLOPS FP4" (4,000 AI TOPS)
        # with sparsity. Assumed: dense FP4 is half that (2 PF), and FP8 and BF16 halve
        # again at each step (1 PF, 500 TF), the professional card running FP32
        # accumulation at full rate. The Workstation Edition's memory is faster (1.792
        # TB/s), so it is not matched here.
        GpuSpec(
            slug="rtx-pro-6000",
            name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
            nvml_names=("RTX PRO 6000 Blackwell Server Edition",),
            memory_bytes=96 * GIB,
            memory_bandwidth_bytes_s=1.6 * _TB,
            bf16_dense_flops=500 * _TFLOPS,
            fp8_dense_flops=1000 * _TFLOPS,
            fp4_dense_flops=2000 * _TFLOPS,
            power_limit_w=600,
            nvlink_bandwidth_bytes_s=None,
            pcie_gen=5,
            pcie_width=16,
            assumed=("bf16_dense_flops", "fp8_dense_flops", "fp4_dense_flops"),
        ),
        # NVIDIA L40S datasheet: 48 GB GDDR6 with ECC, 864 GB/s, BF16 362.05 and FP8 733
        # TFLOPS dense (733 and 1,466 with sparsity), 350 W, PCIe Gen4 x16, no NVLink.
        GpuSpec(
            slug="l40s",
            name="NVIDIA L40S",
            nvml_names=("L40S",),
            memory_bytes=48 * GIB,
            memory_bandwidth_bytes_s=864 * _GB,
            bf16_dense_flops=362.05 * _TFLOPS,
            fp8_dense_flops=733 * _TFLOPS,
            fp4_dense_flops=None,
            power_limit_w=350,
            nvlink_bandwidth_bytes_s=None,
            pcie_gen=4,
            pcie_width=16,
        ),
        # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: 80 GB HBM2e,
        # 2,039 GB/s, BF16 312 TFLOPS dense (624 with sparsity), no FP8, 400 W,
        # NVLink 600 GB/s, PCIe Gen4 64 GB/s (both directions).
        GpuSpec(
            slug="a100",
            name="NVIDIA A100 SXM4 80GB",
            nvml_names=("A100-SXM4-80GB", "A100 SXM4 80GB"),
            memory_bytes=80 * GIB,
            memory_bandwidth_bytes_s=2.039 * _TB,
            bf16_dense_flops=312 * _TFLOPS,
            fp8_dense_flops=None,
            fp4_dense_flops=None,
            power_limit_w=400,
            nvlink_bandwidth_bytes_s=600 * _GB,
            pcie_gen=4,
            pcie_width=16,
        ),
        # NVIDIA GeForce RTX 5090 specifications: 32 GB GDDR7, 1,792 GB/s, 575 W total
        # graphics power, PCIe Gen5 x16, 3,352 AI TOPS (FP4 with sparsity). Assumed, from
        # the RTX Blackwell architecture whitepaper's table as recalled, not re-read: dense
        # FP4 1,676, FP8 419 and BF16 209.5 TFLOPS with FP32 accumulation (GeForce cards
        # run FP32 accumulation at half rate).
        GpuSpec(
            slug="rtx-5090",
            name="NVIDIA GeForce RTX 5090",
            nvml_names=("RTX 5090",),
            nvml_excludes=("Laptop",),
            memory_bytes=32 * GIB,
            memory_bandwidth_bytes_s=1.792 * _TB,
            bf16_dense_flops=209.5 * _TFLOPS,
            fp8_dense_flops=419 * _TFLOPS,
            fp4_dense_flops=1676 * _TFLOPS,
            power_limit_w=575,
            nvlink_bandwidth_bytes_s=None,
            pcie_gen=5,
            pcie_width=16,
            assumed=("bf16_dense_flops", "fp8_dense_flops", "fp4_dense_flops"),
        ),
    )
}


def gpu_by_slug(slug: str) -> GpuSpec:
    """The catalogue entry for `slug`; UnknownGpuError (a KeyError) lists the valid slugs."""
    try:
        return GPUS[slug.strip().lower()]
    except KeyError:
        raise UnknownGpuError(f"unknown GPU {slug!r}", hint=f"valid: {', '.join(GPUS)}") from None


def gpu_for_nvml_name(name: str) -> GpuSpec | None:
    """The entry whose NVML substrings occur in `name` (case-insensitive); None if none do."""
    folded = name.casefold()
    for spec in GPUS.values():
        if any(part.casefold() in folded for part in spec.nvml_excludes):
            continue
        if any(part.casefold() in folded for part in spec.nvml_names):
            return spec
    return None


def pcie_bandwidth_bytes_s(gen: int, width: int) -> float:
    """Data bandwidth of a PCIe link per direction, after encoding (gen5 x16: 63 GB/s)."""
    if gen not in _PCIE_LANE_BYTES_S:
        raise ValueError(f"unknown PCIe generation {gen}; known: {sorted(_PCIE_LANE_BYTES_S)}")
    if width <= 0:
        raise ValueError(f"PCIe width must be positive, got {width}")
    return _PCIE_LANE_BYTES_S[gen] * width
