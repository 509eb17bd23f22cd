"""Single-device ceilings: DRAM copy bandwidth, tensor-core rate, host link bandwidth.

These are the numbers the performance model's ceilings rest on, measured rather than
read from a datasheet: a GPU held at a lower clock or power limit, or a host link
trained at a lower PCIe generation, shows here. Each function takes a torch device and
also runs on the CPU (timed by perf_counter) so it can be tested without a GPU.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Literal

from servelab.core.units import BYTES_PER_GB, GIB
from servelab.model.gpus import GpuSpec
from servelab.probe.comm._timing import gb_s, time_per_call_us
from servelab.probe.comm.results import HostCopyResult, MatmulResult, MemoryCopyResult

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_HOST_COPY_BYTES",
    "DEFAULT_MATMUL_MNK",
    "DEFAULT_MEMORY_COPY_BYTES",
    "FP8_MIN_CAPABILITY",
    "MatmulDtype",
    "fp8_unsupported_reason",
    "measure_host_copy",
    "measure_matmul",
    "measure_memory_copy",
]

DEFAULT_MEMORY_COPY_BYTES = GIB  # large enough that caches do not matter (L2 <= 128 MiB)
DEFAULT_MATMUL_MNK = 8192  # large enough to keep every SM busy, ~1 ms on an H200
DEFAULT_HOST_COPY_BYTES = 256 << 20
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper were the first with FP8 tensor cores

MatmulDtype = Literal["bf16", "fp8", "fp32"]


def measure_memory_copy(
    device: torch.device,
    *,
    size_bytes: int = DEFAULT_MEMORY_COPY_BYTES,
    iterations: int = 5,
    repeats: int = 10,
    spec: GpuSpec | None = None,
) -> MemoryCopyResult:
    """Copy a buffer into another on `device`; each copy reads and writes `size_bytes`."""
    import torch

    src = torch.ones(size_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = time_per_call_us(device, lambda: dst.copy_(src), iterations=iterations, repeats=repeats)
    median = statistics.median(times)
    moved = 2 * size_bytes
    bandwidth = gb_s(moved, median)
    datasheet = spec.memory_bandwidth_bytes_s / BYTES_PER_GB if spec else None
    return MemoryCopyResult(
        device=str(device),
        buffer_bytes=size_bytes,
        bytes_moved=moved,
        time_us=median,
        min_time_us=min(times),
        max_time_us=max(times),
        bandwidth_gb_s=bandwidth,
        datasheet_bandwidth_gb_s=datasheet,
        fraction_of_datasheet=bandwidth / datasheet if datasheet else None,
    )


def measure_matmul(
    device: torch.device,
    *,
    dtype: MatmulDtype = "bf16",
    mnk: int = DEFAULT_MATMUL_MNK,
    iterations: int = 5,
    repeats: int = 10,
    spec: GpuSpec | None = None,
) -> MatmulResult:
    """Time an mnk x mnk x mnk multiply; fp8 goes through torch._scaled_mm (e4m3, bf16 out),
    fp32 (a CPU's own dtype) through plain torch.matmul.

    Raises what torch raises when the dtype cannot run here; see fp8_unsupported_reason.
    """
    import torch

    a = torch.randn(mnk, mnk, device=device)
    b = torch.randn(mnk, mnk, device=device)
    datasheet: float | None = None
    if dtype != "fp8":
        if dtype == "bf16":
            a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
            datasheet = spec.bf16_dense_flops if spec else None
        out = torch.empty_like(a)
        times = time_per_call_us(
            device, lambda: torch.matmul(a, b, out=out), iterations=iterations, repeats=repeats
        )
    else:
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t()  # _scaled_mm wants the second operand column-major
        scale = torch.ones((), device=device)
        # Per-tensor scales and fast accumulation, as FP8 inference GEMMs usually run.
        times = time_per_call_us(
            device,
            lambda: torch._scaled_mm(
                a8, b8, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16, use_fast_accum=True
            ),
            iterations=iterations,
            repeats=repeats,
        )
        datasheet = spec.fp8_dense_flops if spec else None
    median = statistics.median(times)
    tflop_s = 2 * mnk**3 / median / 1e6
    datasheet_tflop_s = datasheet / 1e12 if datasheet else None
    return MatmulResult(
        device=str(device),
        dtype=dtype,
        mnk=mnk,
        time_us=median,
        tflop_s=tflop_s,
        datasheet_tflop_s=datasheet_tflop_s,
        fraction_of_datasheet=tflop_s / datasheet_tflop_s if datasheet_tflop_s else None,
    )


def fp8_unsupported_reason(device: torch.device) -> str | None:
    """Why FP8 matmul cannot run on this CUDA device, or None if it should."""
    import torch

    if device.type != "cuda":
        return None
    capability = torch.cuda.get_device_capability(device)
    if capability < FP8_MIN_CAPABILITY:
        need = ".".join(map(str, FP8_MIN_CAPABILITY))
        have = ".".join(map(str, capability))
        return f"FP8 needs compute capability {need} or newer; {device} is {have}"
    return None


def measure_host_copy(
    device: torch.device,
    *,
    size_bytes: int = DEFAULT_HOST_COPY_BYTES,
    iterations: int = 3,
    repeats: int = 5,
) -> HostCopyResult:
    """Copy a page-locked host buffer to `device` and back (on the CPU: plain memory)."""
    import torch

    pinned = device.type == "cuda"
    host = torch.ones(size_bytes, dtype=torch.uint8)
    if pinned:
        host = host.pin_memory()
    dev = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    h2d = time_per_call_us(
        device,
        lambda: dev.copy_(host, non_blocking=pinned),
        iterations=iterations,
        repeats=repeats,
    )
    d2h = time_per_call_us(
        device,
        lambda: host.copy_(dev, non_blocking=pinned),
        iterations=iterations,
        repeats=repeats,
    )
    h2d_us, d2h_us = statistics.median(h2d), statistics.median(d2h)
    return HostCopyResult(
        device=str(device),
        size_bytes=size_bytes,
        pinned=pinned,
        h2d_time_us=h2d_us,
        h2d_gb_s=gb_s(size_bytes, h2d_us),
        d2h_time_us=d2h_us,
        d2h_gb_s=gb_s(size_bytes, d2h_us),
    )
