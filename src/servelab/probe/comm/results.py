"""What `servelab probe --comm` measured, as pydantic models with the unit in every name.

Bandwidths are in GB/s of 10^9 bytes; sizes are bytes (the nccl-tests and DESIGN sizes
are binary: 12 KB is 12,288 bytes). A part that could not run is None, with its reason
in `CommResults.skipped` (nothing to measure here) or `CommResults.errors` (it failed).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
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
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BandwidthPoint(_Model):
    """One message size of a copy series: time per copy and the bandwidth it gives."""

    size_bytes: int = Field(description="Bytes copied by one operation.")
    time_us: float = Field(
        description=(
            "Median over repeats of the time per copy; each repeat times a batch of "
            "back-to-back copies on one stream and divides by its length."
        )
    )
    min_time_us: float = Field(description="Fastest repeat's time per copy.")
    max_time_us: float = Field(description="Slowest repeat's time per copy.")
    bandwidth_gb_s: float = Field(description="size_bytes / time_us, in 10^9 bytes/s.")


class MemoryCopyResult(_Model):
    """Device-to-device copy of one large buffer: the DRAM bandwidth a kernel can reach."""

    device: str = Field(description="torch device, e.g. 'cuda:0', or 'cpu'.")
    buffer_bytes: int = Field(description="Size of the buffer copied.")
    bytes_moved: int = Field(description="Bytes read plus bytes written: 2 x buffer_bytes.")
    time_us: float = Field(description="Median time per copy.")
    min_time_us: float
    max_time_us: float
    bandwidth_gb_s: float = Field(description="bytes_moved / time_us.")
    datasheet_bandwidth_gb_s: float | None = Field(
        default=None, description="The catalogue's peak DRAM bandwidth for this GPU."
    )
    fraction_of_datasheet: float | None = Field(
        default=None, description="bandwidth_gb_s / datasheet_bandwidth_gb_s; 0.8-0.9 is usual."
    )


class MatmulResult(_Model):
    """Square matrix multiply: the tensor-core rate this GPU reaches at its clocks and power."""

    device: str
    dtype: str = Field(
        description="'bf16', 'fp8' (e4m3 inputs, bf16 output) or, on the CPU, 'fp32'."
    )
    mnk: int = Field(description="m = n = k of the multiply.")
    time_us: float = Field(description="Median time per multiply.")
    tflop_s: float = Field(description="2 m n k / time_us, in 10^12 FLOP/s.")
    datasheet_tflop_s: float | None = Field(
        default=None, description="The catalogue's dense peak for this dtype."
    )
    fraction_of_datasheet: float | None = Field(
        default=None, description="tflop_s / datasheet_tflop_s."
    )


class HostCopyResult(_Model):
    """Host memory to device and back: the PCIe (or C2C) link as a copy engine sees it."""

    device: str
    size_bytes: int = Field(description="Bytes per copy.")
    pinned: bool = Field(description="Host buffer page-locked (pinned), as serving engines use.")
    h2d_time_us: float = Field(description="Median time of one host-to-device copy.")
    h2d_gb_s: float = Field(description="size_bytes / h2d_time_us.")
    d2h_time_us: float = Field(description="Median time of one device-to-host copy.")
    d2h_gb_s: float = Field(description="size_bytes / d2h_time_us.")


class LaunchResult(_Model):
    """Kernel launch latency: a chain of tiny ops dispatched eagerly, and replayed as a graph.

    Each op is an in-place add on `elements` float32 values, one kernel each: the cheapest
    kernel there is, so both figures are lower bounds for a real decode step's kernels.
    """

    device: str
    kernels: int = Field(description="Ops in the chain, one kernel each.")
    elements: int = Field(description="float32 values each op adds to.")
    eager_us_per_kernel: float = Field(
        description=(
            "Median over repeats of the chain's wall time from an idle device until it is "
            "done, divided by `kernels`: each op dispatched from Python through torch to "
            "the driver, the host's pace."
        )
    )
    eager_min_us_per_kernel: float
    eager_max_us_per_kernel: float
    graph_us_per_kernel: float | None = Field(
        default=None,
        description=(
            "Median over repeats of `graph_replays` back-to-back replays of the chain "
            "captured once as a CUDA graph, timed with CUDA events, divided by the kernels "
            "run; None on the CPU."
        ),
    )
    graph_min_us_per_kernel: float | None = None
    graph_max_us_per_kernel: float | None = None
    graph_replays: int = Field(default=0, description="Replays per timed repeat (0: none).")
    chain_verified: bool = Field(
        description="The tensor held the number of adds run, eager and replayed: every op ran."
    )


class P2PResult(_Model):
    """Copies between two GPUs in both directions, by message size."""

    gpu_a: int = Field(description="CUDA index of the first GPU.")
    gpu_b: int = Field(description="CUDA index of the second GPU.")
    p2p_access_reported: bool = Field(
        description="torch.cuda.can_device_access_peer said yes in both directions."
    )
    copy_verified: bool = Field(
        description="A known pattern copied each way arrived intact (compared after the copy)."
    )
    a_to_b: list[BandwidthPoint] = Field(description="Copies from gpu_a into gpu_b.")
    b_to_a: list[BandwidthPoint] = Field(description="Copies from gpu_b into gpu_a.")


class AllReducePoint(_Model):
    """One size of an all-reduce sweep, with nccl-tests' bandwidth definitions."""

    size_bytes: int = Field(description="Bytes of the buffer each rank reduces (count x dtype).")
    count: int = Field(description="Elements per rank.")
    dtype: str
    time_us: float = Field(
        description=(
            "Time per all-reduce: each rank times `iterations` back-to-back in-place calls "
            "after warm-up and divides (nccl-tests' method); the slowest rank's is kept."
        )
    )
    algbw_gb_s: float = Field(description="Algorithm bandwidth: size_bytes / time_us.")
    busbw_gb_s: float = Field(
        description=(
            "Bus bandwidth: algbw x 2(n-1)/n for n ranks, the traffic per link of a ring "
            "all-reduce; compare it with the link's bandwidth per direction."
        )
    )


class NcclSetup(_Model):
    """What NCCL reported about itself while connecting (its NCCL_DEBUG=INFO lines)."""

    version: str | None = Field(default=None, description="e.g. '2.21.5+cuda12.4'.")
    network: str | None = Field(
        default=None, description="Network plugin for inter-node traffic: 'Socket', 'IB'."
    )
    transports: list[str] = Field(
        default_factory=list,
        description="Transports its channels used, e.g. 'P2P/CUMEM', 'SHM', 'NET/Socket'.",
    )
    lines: list[str] = Field(default_factory=list, description="A few raw lines, as evidence.")
    warnings: list[str] = Field(default_factory=list, description="Its WARN lines, if any.")


class AllReduceResult(_Model):
    """An all-reduce sweep, one process per rank, as nccl-tests' all_reduce_perf does it."""

    world_size: int
    backend: str = Field(description="'nccl' on GPUs, 'gloo' on CPUs.")
    device_type: str = Field(description="'cuda' or 'cpu'.")
    dtype: str
    warmup_iterations: int
    iterations: int
    sum_verified: bool | None = Field(
        default=None, description="A first all-reduce of known values gave the right sum."
    )
    points: list[AllReducePoint] = Field(default_factory=list)
    nccl: NcclSetup | None = Field(default=None, description="None with gloo.")
    error: str | None = Field(
        default=None, description="Why the sweep stopped early; points holds what finished."
    )
    log_tail: list[str] = Field(
        default_factory=list, description="Last lines of the failing rank's log, on error."
    )


class CudaDevice(_Model):
    """A GPU as torch sees it, with the UUID that joins it to NVML's view."""

    index: int = Field(description="CUDA index in this process (after CUDA_VISIBLE_DEVICES).")
    name: str
    uuid: str = Field(description="'GPU-…' as NVML and nvidia-smi print it.")
    compute_capability: str = Field(description="e.g. '9.0'.")
    catalogue_slug: str | None = Field(
        default=None, description="The servelab.model.gpus entry compared with; None if none."
    )


class CpuThreadRates(_Model):
    """The CPU's rates with torch running `threads` intra-op threads (torch.set_num_threads).

    Facts, not verdicts: a CPU has no datasheet here to compare with. The model reads them
    as the ceiling of an engine running on the CPU at the same thread count.
    """

    threads: int = Field(description="torch intra-op threads while these were measured.")
    memory_copy: MemoryCopyResult = Field(
        description="One buffer copied into another, larger than the last-level cache."
    )
    matmul: list[MatmulResult] = Field(
        description="Square multiplies: fp32 always, bf16 with --comm (torch's CPU kernels)."
    )
    launch: LaunchResult = Field(
        description="The launch chain on the CPU: one eager torch op's dispatch and run."
    )


class CpuRates(_Model):
    """The CPU measured at each thread count an engine here is likely to run with."""

    cores: int = Field(description="CPUs this process may run on (its affinity).")
    torch_threads: int = Field(description="torch.get_num_threads() before measuring.")
    omp_num_threads: str | None = Field(
        default=None, description="OMP_NUM_THREADS in the measuring process's environment."
    )
    last_level_cache_bytes: int | None = Field(
        default=None, description="Largest CPU cache sysfs reports; the copy buffer exceeds it."
    )
    by_threads: list[CpuThreadRates] = Field(default_factory=list, description="By thread count.")
    errors: dict[str, str] = Field(
        default_factory=dict, description="Thread count (or part) -> the error it raised."
    )
    duration_s: float = Field(default=0.0, description="Wall time of the measurement.")

    def at(self, threads: int) -> CpuThreadRates | None:
        """The rates measured at exactly `threads`, or None."""
        return next((r for r in self.by_threads if r.threads == threads), None)


class CommResults(_Model):
    """Everything `run_comm` measured on this machine; nothing here was raised."""

    torch_version: str | None = None
    cuda_version: str | None = None
    devices: list[CudaDevice] = Field(default_factory=list)
    memory_copy: list[MemoryCopyResult] | None = None
    matmul: list[MatmulResult] | None = None
    host_copy: list[HostCopyResult] | None = None
    launch: list[LaunchResult] | None = Field(
        default=None, description="Kernel launch latency per device (the CPU without CUDA)."
    )
    p2p: list[P2PResult] | None = None
    allreduce: AllReduceResult | None = None
    cpu: CpuRates | None = Field(
        default=None,
        description="The CPU's copy bandwidth, matmul rates and op dispatch by thread count.",
    )
    skipped: dict[str, str] = Field(
        default_factory=dict, description="Part (or part:device) -> why it did not run here."
    )
    errors: dict[str, str] = Field(
        default_factory=dict, description="Part (or part:device) -> the error it raised."
    )
    duration_s: float = Field(default=0.0, description="Wall time of run_comm.")
