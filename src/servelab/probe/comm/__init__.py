"""`servelab probe --comm`: measured ceilings of this machine's GPUs and the links between them.

`run_comm` runs what this machine allows and never raises: per GPU, DRAM copy bandwidth,
bf16 and fp8 matmul rates and pinned host copies (device.py) and the kernel launch
latency, eager and replayed as a CUDA graph (launch.py; on a machine without CUDA, the
CPU's eager dispatch alone); per pair of GPUs, copies by
message size both ways with a copy-and-verify check (p2p.py); across all GPUs, an
nccl-tests-style all-reduce sweep with the transport NCCL chose (allreduce.py,
nccl_log.py); and the CPU itself, by thread count: copy bandwidth, matmul rate and op
dispatch (cpu.py). Parts that cannot run here are listed in `skipped` with the reason,
parts that failed in `errors`. torch is imported only inside the functions.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servelab.model.gpus import GpuSpec, gpu_for_nvml_name
from servelab.probe.comm.allreduce import (
    DEFAULT_ALLREDUCE_TIMEOUT_S,
    allreduce_sizes,
    run_allreduce,
)
from servelab.probe.comm.cpu import FULL_CPU_PLAN, QUICK_CPU_PLAN, measure_cpu
from servelab.probe.comm.device import (
    fp8_unsupported_reason,
    measure_host_copy,
    measure_matmul,
    measure_memory_copy,
)
from servelab.probe.comm.launch import NO_GRAPHS_ON_CPU, measure_launch
from servelab.probe.comm.p2p import P2P_SIZES_BYTES, QUICK_P2P_SIZES_BYTES, measure_p2p_pair
from servelab.probe.comm.results import (
    AllReducePoint,
    AllReduceResult,
    BandwidthPoint,
    CommResults,
    CpuRates,
    CpuThreadRates,
    CudaDevice,
    HostCopyResult,
    LaunchResult,
    MatmulResult,
    MemoryCopyResult,
    NcclSetup,
    P2PResult,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "CPU_PART",
    "NEEDS_TWO_GPUS",
    "NO_CUDA",
    "NO_DEVICES",
    "NO_GRAPHS_ON_CPU",
    "NO_TORCH",
    "PARTS",
    "AllReducePoint",
    "AllReduceResult",
    "BandwidthPoint",
    "CommResults",
    "CpuRates",
    "CpuThreadRates",
    "CudaDevice",
    "HostCopyResult",
    "LaunchResult",
    "MatmulResult",
    "MemoryCopyResult",
    "NcclSetup",
    "P2PResult",
    "cuda_uuid_map",
    "measure_launch",
    "run_comm",
]

PARTS = ("memory_copy", "matmul", "host_copy", "launch", "p2p", "allreduce")
"""The GPU parts; the CPU's rates are one more part, `CPU_PART`, measured with or without CUDA."""
CPU_PART = "cpu"
NO_TORCH = "torch is not installed (pip install 'servelab[local]')"
NO_CUDA = "no CUDA device visible to torch"
NEEDS_TWO_GPUS = "needs 2 or more GPUs"
NO_DEVICES = "torch could not read its CUDA devices (see errors['devices'])"


@dataclass(frozen=True)
class _Plan:
    """How hard each part tries; `quick` trades repeats and sizes for time."""

    repeats: int
    matmul_repeats: int
    p2p_repeats: int
    p2p_large_repeats: int
    p2p_sizes_bytes: tuple[int, ...]
    allreduce_factor: int
    allreduce_warmup: int
    allreduce_iterations: int


_FULL = _Plan(10, 10, 5, 3, P2P_SIZES_BYTES, 2, 5, 20)
_QUICK = _Plan(5, 3, 3, 2, QUICK_P2P_SIZES_BYTES, 4, 3, 10)


def run_comm(
    *,
    progress: Callable[[str], None] | None = None,
    p2p_sizes_bytes: Sequence[int] | None = None,
    allreduce_sizes_bytes: Sequence[int] | None = None,
    quick: bool = False,
    allreduce_timeout_s: float = DEFAULT_ALLREDUCE_TIMEOUT_S,
    log_dir: Path | None = None,
) -> CommResults:
    """Measure every part this machine allows; `progress` hears one line per step.

    Sizes default to DESIGN.md's P2P sizes and nccl-tests' 8 B-256 MiB (x2, or x4 when
    `quick`). NCCL's logs are kept under `log_dir` when given.
    """
    started = time.perf_counter()
    say = progress or (lambda _message: None)
    plan = _QUICK if quick else _FULL
    results = CommResults()
    try:
        import torch
    except ImportError:
        results.skipped = dict.fromkeys((*PARTS, CPU_PART), NO_TORCH)
        return results
    results.torch_version = str(torch.__version__)
    results.cuda_version = torch.version.cuda
    say("the CPU: copy bandwidth, matmul rate and op dispatch by thread count")
    with _recorded(results, CPU_PART):
        results.cpu = measure_cpu(plan=QUICK_CPU_PLAN if quick else FULL_CPU_PLAN)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        results.skipped = {part: NO_CUDA for part in PARTS if part != "launch"}
        _cpu_launch(results, plan, say)
        results.duration_s = time.perf_counter() - started
        return results

    try:
        results.devices = _cuda_devices()
    except Exception as exc:  # a driver that torch can count but not open
        results.errors["devices"] = _describe(exc)
        results.skipped = dict.fromkeys(PARTS, NO_DEVICES)
        results.duration_s = time.perf_counter() - started
        return results
    devices = [torch.device("cuda", d.index) for d in results.devices]
    specs = {d.index: gpu_for_nvml_name(d.name) for d in results.devices}
    _single_device_parts(results, devices, specs, plan, say)
    if len(devices) < 2:
        results.skipped.update(p2p=NEEDS_TWO_GPUS, allreduce=NEEDS_TWO_GPUS)
    else:
        sizes = tuple(p2p_sizes_bytes) if p2p_sizes_bytes is not None else plan.p2p_sizes_bytes
        _p2p_part(results, devices, sizes, plan, say)
        torch.cuda.empty_cache()  # the ranks need the memory this process cached
        say(f"all-reduce over {len(devices)} GPUs (NCCL)")
        try:
            results.allreduce = run_allreduce(
                world_size=len(devices),
                sizes_bytes=allreduce_sizes(factor=plan.allreduce_factor)
                if allreduce_sizes_bytes is None
                else allreduce_sizes_bytes,
                warmup_iterations=plan.allreduce_warmup,
                iterations=plan.allreduce_iterations,
                timeout_s=allreduce_timeout_s,
                log_dir=log_dir,
            )
        except Exception as exc:
            results.errors["allreduce"] = _describe(exc)
    results.duration_s = time.perf_counter() - started
    return results


def cuda_uuid_map() -> dict[str, int]:
    """NVML's GPU UUID ('GPU-…') -> CUDA index in this process; {} without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    return {
        _nvml_uuid(torch.cuda.get_device_properties(i).uuid): i
        for i in range(torch.cuda.device_count())
    }


def _nvml_uuid(raw: object) -> str:
    """torch prints a CUDA UUID bare ('58c5…-…'); NVML prefixes it with 'GPU-'."""
    text = str(raw)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _cuda_devices() -> list[CudaDevice]:
    import torch

    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        spec = gpu_for_nvml_name(props.name)
        devices.append(
            CudaDevice(
                index=index,
                name=props.name,
                uuid=_nvml_uuid(props.uuid),
                compute_capability=f"{props.major}.{props.minor}",
                catalogue_slug=spec.slug if spec else None,
            )
        )
    return devices


def _single_device_parts(
    results: CommResults,
    devices: list[torch.device],
    specs: dict[int, GpuSpec | None],
    plan: _Plan,
    say: Callable[[str], None],
) -> None:
    """Memory copy, matmul (bf16, fp8), host copies and kernel launches on each GPU; errors
    per device."""
    results.memory_copy, results.matmul, results.host_copy = [], [], []
    results.launch = []
    for device in devices:
        spec = specs[device.index]
        say(f"memory copy on {device}")
        with _recorded(results, f"memory_copy:{device}"):
            results.memory_copy.append(measure_memory_copy(device, repeats=plan.repeats, spec=spec))
        say(f"bf16 matmul on {device}")
        with _recorded(results, f"matmul:bf16:{device}"):
            results.matmul.append(
                measure_matmul(device, dtype="bf16", repeats=plan.matmul_repeats, spec=spec)
            )
        reason = fp8_unsupported_reason(device)
        if reason is not None:
            results.skipped[f"matmul:fp8:{device}"] = reason
        else:
            say(f"fp8 matmul on {device}")
            with _recorded(results, f"matmul:fp8:{device}"):
                results.matmul.append(
                    measure_matmul(device, dtype="fp8", repeats=plan.matmul_repeats, spec=spec)
                )
        say(f"host copies to and from {device}")
        with _recorded(results, f"host_copy:{device}"):
            results.host_copy.append(measure_host_copy(device, repeats=plan.repeats))
        say(f"kernel launches on {device}, eager and replayed as a CUDA graph")
        with _recorded(results, f"launch:{device}"):
            results.launch.append(measure_launch(device, repeats=plan.repeats))


def _cpu_launch(results: CommResults, plan: _Plan, say: Callable[[str], None]) -> None:
    """Without CUDA, the one part that still means something: torch's eager dispatch here."""
    import torch

    say("kernel launch latency on the CPU (eager only: no CUDA graphs without CUDA)")
    results.skipped["launch:graph"] = NO_GRAPHS_ON_CPU
    with _recorded(results, "launch:cpu"):
        results.launch = [measure_launch(torch.device("cpu"), repeats=plan.repeats)]


def _p2p_part(
    results: CommResults,
    devices: list[torch.device],
    sizes: Sequence[int],
    plan: _Plan,
    say: Callable[[str], None],
) -> None:
    results.p2p = []
    for a, b in itertools.combinations(devices, 2):
        say(f"P2P copies {a} <-> {b}")
        with _recorded(results, f"p2p:{a.index}-{b.index}"):
            results.p2p.append(
                measure_p2p_pair(
                    a,
                    b,
                    sizes_bytes=sizes,
                    repeats=plan.p2p_repeats,
                    large_repeats=plan.p2p_large_repeats,
                )
            )


@contextlib.contextmanager
def _recorded(results: CommResults, key: str) -> Iterator[None]:
    """Record an exception under `key` in results.errors instead of raising it."""
    try:
        yield
    except Exception as exc:
        results.errors[key] = _describe(exc)


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".strip()
