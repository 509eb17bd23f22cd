"""Verdicts on what `--comm` measured: memory and tensor rates against the datasheet,
GPU-to-GPU copies, and the transport NCCL chose."""

from __future__ import annotations

from collections.abc import Mapping

from servelab.core.units import BYTES_PER_GB
from servelab.probe.comm.results import CommResults, P2PResult
from servelab.probe.verdict import Severity, Verdict

__all__ = ["comm_verdicts"]

MEMORY_LOW_FRACTION = 0.7
"""Below this share of datasheet DRAM bandwidth a plain copy is slow: 0.8-0.9 is usual."""
MATMUL_LOW_FRACTION = 0.5
"""Below this share of the dense datasheet rate a large matmul is slow: 0.6-0.8 is usual."""
LINK_LOW_FRACTION = 0.5
"""Below this share of the link's bandwidth per direction a large GPU-to-GPU copy is slow.
Measured: 256 MB between two H200 over NV18 reached 387 GB/s, 0.86 of 450; the story's
bare-metal PCIe P2P 53.8 GB/s, 0.85 of Gen5 x16's 63."""
SMALL_COPY_BYTES = 12 * 1024
"""The story's message: one decode step's all-reduce of a hidden state is this small. A
copy engine takes about 13 µs for it whatever the link (12.9 µs over NV18 between two
H200, 13.7 µs staged through the host in the story's VM), so its time is evidence, not a
verdict: the large copies tell the links apart."""


def comm_verdicts(
    comm: CommResults, link_bytes_s: Mapping[tuple[int, int], float] | None = None
) -> list[Verdict]:
    """Findings from the measurements; parts that did not run give none.

    `link_bytes_s` is each CUDA pair's link bandwidth per direction (NVLink or PCIe, from
    the catalogue and NVML), which the large copies are judged against.
    """
    verdicts = _memory(comm) + _matmul(comm) + _p2p(comm, link_bytes_s or {}) + _nccl(comm)
    if comm.errors:
        verdicts.append(
            Verdict(
                code="comm-errors",
                severity=Severity.WARNING,
                title=f"{len(comm.errors)} measurement(s) failed",
                evidence=[f"{part}: {error}" for part, error in comm.errors.items()],
                meaning="What failed was not measured; the other parts stand.",
                action="Read the errors; rerun `servelab probe --comm` once they are fixed.",
                subjects=sorted(comm.errors),
            )
        )
    return verdicts


def _memory(comm: CommResults) -> list[Verdict]:
    slow = [
        m
        for m in comm.memory_copy or []
        if m.fraction_of_datasheet is not None and m.fraction_of_datasheet < MEMORY_LOW_FRACTION
    ]
    if not slow:
        return []
    return [
        Verdict(
            code="memory-bandwidth-low",
            severity=Severity.WARNING,
            title="GPU memory bandwidth well below its datasheet",
            evidence=[
                f"{m.device}: {m.bandwidth_gb_s:,.0f} GB/s = {m.fraction_of_datasheet:.0%} of "
                f"{m.datasheet_bandwidth_gb_s:,.0f} GB/s"
                for m in slow
            ],
            meaning=(
                "Decode is memory-bound: every step reads the weights and the KV cache, so "
                "single-stream tok/s scales with this bandwidth."
            ),
            action=(
                "Check clocks and power (the GPU verdicts), other processes on the GPU "
                "(nvidia-smi), and that the GPU is the model the catalogue assumes."
            ),
            subjects=[m.device for m in slow],
        )
    ]


def _matmul(comm: CommResults) -> list[Verdict]:
    slow = [
        m
        for m in comm.matmul or []
        if m.fraction_of_datasheet is not None and m.fraction_of_datasheet < MATMUL_LOW_FRACTION
    ]
    if not slow:
        return []
    return [
        Verdict(
            code="matmul-rate-low",
            severity=Severity.WARNING,
            title="Matrix-multiply rate well below its datasheet",
            evidence=[
                f"{m.device} {m.dtype}: {m.tflop_s:,.0f} TFLOP/s = "
                f"{m.fraction_of_datasheet:.0%} of {m.datasheet_tflop_s:,.0f}"
                for m in slow
            ],
            meaning=(
                "Prefill and large decode batches are compute-bound; a low rate shows as slow "
                "TTFT and an early throughput plateau."
            ),
            action="Check power limit, clocks and throttle reasons (the GPU verdicts).",
            subjects=[m.device for m in slow],
        )
    ]


def _p2p(comm: CommResults, links: Mapping[tuple[int, int], float]) -> list[Verdict]:
    pairs = comm.p2p or []
    broken = [p for p in pairs if not p.copy_verified]
    no_access = [p for p in pairs if p.copy_verified and not p.p2p_access_reported]
    shares = {(p.gpu_a, p.gpu_b): _link_share(p, links) for p in pairs}
    slow = [p for p in pairs if (shares[(p.gpu_a, p.gpu_b)] or 1.0) < LINK_LOW_FRACTION]
    verdicts: list[Verdict] = []
    if broken:
        verdicts.append(
            Verdict(
                code="p2p-copy-corrupt",
                severity=Severity.CRITICAL,
                title="GPU-to-GPU copies did not arrive intact",
                evidence=[f"gpu{p.gpu_a} <-> gpu{p.gpu_b}: pattern mismatch" for p in broken],
                meaning=(
                    "Data copied between these GPUs came back wrong: tensor-parallel results "
                    "would be silently corrupt. Known causes: IOMMU/ACS settings that let P2P "
                    "be reported but not carried, or a faulty link."
                ),
                action=(
                    "Do not serve across these GPUs. Disable P2P (NCCL_P2P_DISABLE=1) to "
                    "confirm, and report it to the machine's provider."
                ),
                subjects=[f"cuda{p.gpu_a}-cuda{p.gpu_b}" for p in broken],
            )
        )
    if no_access:
        verdicts.append(
            Verdict(
                code="p2p-access-denied",
                severity=Severity.CRITICAL,
                title="CUDA reports no peer access between GPUs",
                evidence=[
                    f"gpu{p.gpu_a} <-> gpu{p.gpu_b}: can_device_access_peer = False"
                    for p in no_access
                ],
                meaning=(
                    "Copies between these GPUs are staged through host memory, and NCCL uses "
                    "its SHM or network transport instead of P2P: every all-reduce of a "
                    "tensor-parallel group crosses PCIe twice through the host."
                ),
                action=(
                    "Keep each tensor-parallel group within GPUs that have peer access, or ask "
                    "for a machine (or VM configuration) with P2P enabled."
                ),
                subjects=[f"cuda{p.gpu_a}-cuda{p.gpu_b}" for p in no_access],
            )
        )
    if slow:
        verdicts.append(
            Verdict(
                code="p2p-copy-slow",
                severity=Severity.WARNING,
                title="GPU-to-GPU copies reach under half of their link's bandwidth",
                evidence=[
                    f"gpu{p.gpu_a} <-> gpu{p.gpu_b}: {_large(p)} = "
                    f"{shares[(p.gpu_a, p.gpu_b)]:.0%} of "
                    f"{links[(p.gpu_a, p.gpu_b)] / BYTES_PER_GB:,.0f} GB/s per direction; "
                    f"{SMALL_COPY_BYTES // 1024} KB in {_small_copy_us(p) or 0:.1f} µs"
                    for p in slow
                ],
                meaning=(
                    "The copies do not use the link the topology promises: staged through host "
                    "memory, a PCIe link below its width or generation, or a hypervisor in the "
                    "way. Every tensor-parallel all-reduce pays it, on every layer of every "
                    "decode step."
                ),
                action=(
                    "Compare with the NCCL transport below and the PCIe verdicts; prefer layouts "
                    "with fewer GPUs per tensor-parallel group (more data parallelism) until "
                    "the path is fixed."
                ),
                subjects=[f"cuda{p.gpu_a}-cuda{p.gpu_b}" for p in slow],
            )
        )
    return verdicts


def _link_share(pair: P2PResult, links: Mapping[tuple[int, int], float]) -> float | None:
    """The largest copy's bandwidth (slower direction) over the link's, when known."""
    link = links.get((pair.gpu_a, pair.gpu_b))
    largest = _largest_copy(pair)
    if not link or largest is None:
        return None
    return largest[1] * BYTES_PER_GB / link


def _large(pair: P2PResult) -> str:
    size, bandwidth = _largest_copy(pair) or (0, 0.0)
    return f"{size >> 20} MB at {bandwidth:,.0f} GB/s"


def _largest_copy(pair: P2PResult) -> tuple[int, float] | None:
    """The largest size copied and its slower direction's bandwidth, in GB/s."""
    points = [*pair.a_to_b, *pair.b_to_a]
    if not points:
        return None
    largest = max(point.size_bytes for point in points)
    return largest, min(p.bandwidth_gb_s for p in points if p.size_bytes == largest)


def _small_copy_us(pair: P2PResult) -> float | None:
    times = [
        point.time_us
        for point in (*pair.a_to_b, *pair.b_to_a)
        if point.size_bytes == SMALL_COPY_BYTES
    ]
    return max(times) if times else None


def _nccl(comm: CommResults) -> list[Verdict]:
    result = comm.allreduce
    if result is None or result.nccl is None:
        return []
    staged = [t for t in result.nccl.transports if t.startswith(("SHM", "NET"))]
    if not staged:
        return []
    return [
        Verdict(
            code="nccl-not-p2p",
            severity=Severity.WARNING,
            title=f"NCCL moves GPU-to-GPU traffic through {', '.join(staged)}",
            evidence=result.nccl.lines[:4] or [f"transports: {result.nccl.transports}"],
            meaning=(
                "Within one machine NCCL prefers P2P (NVLink or PCIe peer DMA); SHM stages "
                "each message in host memory and NET goes through a network stack, adding "
                "latency to every all-reduce of a tensor-parallel step."
            ),
            action=(
                "Check the P2P verdicts; if P2P is supported but unused, look for "
                "NCCL_P2P_DISABLE or NCCL_P2P_LEVEL in the environment."
            ),
            subjects=["nccl"],
        )
    ]
