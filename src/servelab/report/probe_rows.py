"""A probe report as plain rows: the one place its facts become table cells.

The terminal (report.probe, with Rich) and the HTML and Markdown report (report.sections)
both draw these, so a fact reads the same everywhere. Cells are plain text; markup and
escaping are the renderers' job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servelab.core.units import GIB, KIB, MIB
from servelab.probe.comm.results import CommResults, CpuRates, MatmulResult
from servelab.probe.gpus import GpuFacts, GpuInventory
from servelab.probe.report import ProbeReport
from servelab.probe.sysfs import format_cpulist

_GFLOP_PER_TFLOP = 1e3

__all__ = [
    "PairCell",
    "RowTable",
    "comm_tables",
    "cpu_table",
    "gpu_table",
    "host_rows",
    "pair_matrix",
]


@dataclass(frozen=True)
class RowTable:
    title: str
    header: list[str]
    rows: list[list[str]]
    right: frozenset[int] = frozenset()
    """Columns aligned right (numbers)."""
    bad: frozenset[tuple[int, int]] = frozenset()
    """(row, column) cells that show a problem."""


@dataclass(frozen=True)
class PairCell:
    text: str
    usable: bool | None
    """P2P usable between the pair; None on the diagonal or where unknown."""


def host_rows(report: ProbeReport) -> list[tuple[str, str]]:
    """CPU, memory, NUMA, kernel, virtualization and driver, as (name, value)."""
    host, virt = report.host, report.virtualization
    cores = f"{host.logical_cpus or '?'} logical CPUs"
    if host.physical_cores:
        cores += f", {host.physical_cores} cores"
    if host.sockets:
        cores += f", {host.sockets} socket(s)"
    rows = [("CPU", f"{host.cpu_model or 'unknown'} ({cores})")]
    if host.memory_bytes:
        rows.append(("memory", f"{host.memory_bytes / GIB:,.1f} GiB"))
    for node in host.numa_nodes:
        distances = " ".join(map(str, node.distances))
        rows.append(
            (f"NUMA node {node.id}", f"CPUs {format_cpulist(node.cpus)}; distances {distances}")
        )
    if not host.numa_nodes:
        rows.append(("NUMA", "no nodes exposed by the kernel"))
    if host.affinity is not None:
        rows.append(("this process", f"may run on CPUs {format_cpulist(host.affinity)}"))
    rows.append(("kernel", host.kernel_release or "unknown"))
    rows.append(("virtualization", virt.summary))
    gpus = report.gpus
    if gpus is not None:
        rows.append(
            (
                "driver",
                f"{gpus.driver_version or '?'} (CUDA {gpus.cuda_driver_version or '?'}, "
                f"NVML {gpus.nvml_version or '?'})",
            )
        )
    elif report.nvml.reason:
        rows.append(("NVML", report.nvml.reason))
    return rows


def gpu_table(inventory: GpuInventory) -> RowTable:
    """One column per GPU, one row per fact: stays readable from 1 to 8 GPUs."""
    header = [""]
    for gpu in inventory.gpus:
        cuda = "" if gpu.cuda_index is None else f" (cuda {gpu.cuda_index})"
        header.append(f"GPU{gpu.nvml_index}{cuda}")
    cells: dict[str, Callable[[GpuFacts], str]] = {
        "name": lambda g: g.name or "?",
        "architecture": lambda g: f"{g.architecture or '?'} {g.compute_capability or ''}",
        "bus id": lambda g: g.pci_bus_id or "?",
        "UUID": lambda g: (g.uuid or "?")[:12] + "…",
        "memory used/total": _memory,
        "power draw/limit": _power,
        "SM clock now/max": lambda g: f"{_num(g.sm_clock_mhz)}/{_num(g.sm_clock_max_mhz)} MHz",
        "PCIe now (max)": lambda g: (
            f"Gen{_num(g.pcie_gen)} x{_num(g.pcie_width)} "
            f"(Gen{_num(g.pcie_gen_max)} x{_num(g.pcie_width_max)})"
        ),
        "NUMA node": _numa,
        "local CPUs": lambda g: format_cpulist(g.local_cpus) if g.local_cpus else "?",
        "IOMMU group": lambda g: g.iommu_group or "none",
        "ECC": _ecc,
        "MIG": lambda g: "?" if g.mig_enabled is None else ("on" if g.mig_enabled else "off"),
        "virtualization": lambda g: g.virtualization_mode or "?",
        "clock events": lambda g: ", ".join(g.clock_event_reasons) or "none",
    }
    rows = [[label, *(cell(gpu) for gpu in inventory.gpus)] for label, cell in cells.items()]
    return RowTable(title="GPUs", header=header, rows=rows)


def pair_matrix(inventory: GpuInventory) -> list[list[PairCell]]:
    """Topology and P2P read/write between every two GPUs (nvidia-smi topo words)."""
    n = len(inventory.gpus)
    by_pair = {(p.a, p.b): p for p in inventory.pairs} | {(p.b, p.a): p for p in inventory.pairs}
    matrix = []
    for a in range(n):
        row = []
        for b in range(n):
            pair = by_pair.get((a, b))
            if a == b or pair is None:
                row.append(PairCell("X" if a == b else "?", None))
                continue
            usable = (pair.p2p_read == "OK" and pair.p2p_write == "OK") or pair.p2p_nvlink == "OK"
            text = f"{pair.topology or '?'} {pair.p2p_read or '?'}/{pair.p2p_write or '?'}"
            row.append(PairCell(text, usable))
        matrix.append(row)
    return matrix


def comm_tables(comm: CommResults) -> list[RowTable]:
    """The measurements: per GPU against the datasheet, GPU↔GPU copies, all-reduce, and the
    CPU by thread count."""
    tables = []
    if comm.memory_copy or comm.matmul or comm.host_copy:
        rows = [
            [
                m.device,
                f"memory copy, {m.buffer_bytes / GIB:g} GiB buffer (read + written)",
                f"{m.bandwidth_gb_s:,.0f} GB/s",
                _opt(m.datasheet_bandwidth_gb_s, "GB/s"),
                _share(m.fraction_of_datasheet),
            ]
            for m in comm.memory_copy or []
        ]
        rows += [
            [
                mm.device,
                f"{mm.dtype} matmul {mm.mnk}³",
                f"{mm.tflop_s:,.0f} TFLOP/s",
                _opt(mm.datasheet_tflop_s, "TFLOP/s"),
                _share(mm.fraction_of_datasheet),
            ]
            for mm in comm.matmul or []
        ]
        rows += [
            [
                h.device,
                f"host→device / device→host, {'pinned' if h.pinned else 'pageable'}, "
                f"{h.size_bytes / 2**20:g} MiB",
                f"{h.h2d_gb_s:,.1f} / {h.d2h_gb_s:,.1f} GB/s",
                "",
                "",
            ]
            for h in comm.host_copy or []
        ]
        tables.append(
            RowTable(
                title="Measured on each GPU",
                header=["device", "what", "measured", "datasheet", "share"],
                rows=rows,
                right=frozenset({0, 2, 3, 4}),
            )
        )
    if comm.launch:
        tables.append(_launch_table(comm))
    if comm.p2p:
        tables.append(_p2p_table(comm))
    if comm.allreduce is not None:
        tables.append(_allreduce_table(comm))
    if comm.cpu is not None and (comm.cpu.by_threads or comm.cpu.errors):
        tables.append(cpu_table(comm.cpu))
    return tables


def cpu_table(cpu: CpuRates) -> RowTable:
    """The CPU's rates at each torch thread count: what a CPU engine's ceiling is made of."""
    rows = []
    for rates in cpu.by_threads:
        by_dtype = {m.dtype: m for m in rates.matmul}
        copy = rates.memory_copy
        rows.append(
            [
                str(rates.threads),
                f"{copy.bandwidth_gb_s:,.1f} GB/s",
                _cpu_matmul(by_dtype.get("fp32")),
                _cpu_matmul(by_dtype.get("bf16")),
                f"{rates.launch.eager_us_per_kernel:,.2f} µs",
            ]
        )
    rows += [[count, f"failed: {why}", "", "", ""] for count, why in cpu.errors.items()]
    buffer = cpu.by_threads[0].memory_copy.buffer_bytes if cpu.by_threads else None
    title = f"Measured on the CPU ({cpu.cores} cores"
    title += f"; copy buffer {buffer / MIB:g} MiB, read + written)" if buffer else ")"
    return RowTable(
        title=title,
        header=["torch threads", "memory copy", "fp32 matmul", "bf16 matmul", "op dispatch"],
        rows=rows,
        right=frozenset({0, 1, 2, 3, 4}),
    )


def _cpu_matmul(result: MatmulResult | None) -> str:
    if result is None:
        return ""
    return f"{result.tflop_s * _GFLOP_PER_TFLOP:,.0f} GFLOP/s ({result.mnk}³)"


def _launch_table(comm: CommResults) -> RowTable:
    """Per-kernel launch latency: the model's kernel floor is kernels x these."""
    rows = [
        [
            launch.device,
            f"{launch.kernels:,} tiny ops in a chain"
            + ("" if launch.chain_verified else " (not every op ran)"),
            f"{launch.eager_us_per_kernel:,.2f} µs",
            "" if launch.graph_us_per_kernel is None else f"{launch.graph_us_per_kernel:,.2f} µs",
        ]
        for launch in comm.launch or []
    ]
    return RowTable(
        title="Kernel launch, per kernel",
        header=["device", "what", "eager dispatch", "CUDA-graph replay"],
        rows=rows,
        right=frozenset({0, 2, 3}),
    )


def _p2p_table(comm: CommResults) -> RowTable:
    sizes = [p.size_bytes for p in comm.p2p[0].a_to_b] if comm.p2p else []
    rows: list[list[str]] = []
    bad: set[tuple[int, int]] = set()
    for pair in comm.p2p or []:
        for label, points in (
            (f"{pair.gpu_a}→{pair.gpu_b}", pair.a_to_b),
            (f"{pair.gpu_b}→{pair.gpu_a}", pair.b_to_a),
        ):
            by_size = {p.size_bytes: p for p in points}
            if not pair.p2p_access_reported:
                bad.add((len(rows), 1))
            if not pair.copy_verified:
                bad.add((len(rows), 2))
            rows.append(
                [
                    f"cuda {label}",
                    "yes" if pair.p2p_access_reported else "no",
                    "yes" if pair.copy_verified else "NO",
                    *(
                        f"{by_size[s].time_us:,.1f} µs {by_size[s].bandwidth_gb_s:,.1f}"
                        if s in by_size
                        else "-"
                        for s in sizes
                    ),
                ]
            )
    return RowTable(
        title="GPU↔GPU copies (µs per copy, GB/s)",
        header=["pair", "P2P access", "verified", *(_size(s) for s in sizes)],
        rows=rows,
        right=frozenset(range(3, 3 + len(sizes))),
        bad=frozenset(bad),
    )


def _allreduce_table(comm: CommResults) -> RowTable:
    result = comm.allreduce
    assert result is not None
    title = f"all-reduce, {result.world_size} ranks, {result.backend}, {result.dtype}"
    if result.nccl is not None:
        title += f", NCCL {result.nccl.version or '?'}"
        title += f", transport {', '.join(result.nccl.transports) or 'not reported'}"
    if result.error:
        title += f" (stopped early: {result.error})"
    rows = [
        [
            _size(point.size_bytes),
            f"{point.count:,}",
            f"{point.time_us:,.1f}",
            f"{point.algbw_gb_s:,.2f}",
            f"{point.busbw_gb_s:,.2f}",
        ]
        for point in result.points
    ]
    return RowTable(
        title=title,
        header=["size", "count", "time µs", "algbw GB/s", "busbw GB/s"],
        rows=rows,
        right=frozenset(range(5)),
    )


def _memory(gpu: GpuFacts) -> str:
    if gpu.memory_total_bytes is None:
        return "?"
    used = gpu.memory_used_bytes or 0
    return f"{used / GIB:,.1f}/{gpu.memory_total_bytes / GIB:,.1f} GiB"


def _power(gpu: GpuFacts) -> str:
    draw = "?" if gpu.power_draw_w is None else f"{gpu.power_draw_w:.0f}"
    limit = "?" if gpu.power_limit_w is None else f"{gpu.power_limit_w:.0f}"
    text = f"{draw}/{limit} W"
    if gpu.default_power_limit_w and gpu.default_power_limit_w != gpu.power_limit_w:
        text += f" (default {gpu.default_power_limit_w:.0f})"
    return text


def _numa(gpu: GpuFacts) -> str:
    if gpu.numa_node is None:
        return "?"
    return "-1 (unknown)" if gpu.numa_node == -1 else str(gpu.numa_node)


def _ecc(gpu: GpuFacts) -> str:
    if gpu.ecc_enabled is None:
        return "?"
    if not gpu.ecc_enabled:
        return "off"
    return f"on, {gpu.ecc_errors_uncorrected or 0} uncorrected"


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


def _opt(value: float | None, unit: str) -> str:
    return "" if value is None else f"{value:,.0f} {unit}"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def _size(size: int) -> str:
    for unit, factor in (("GB", GIB), ("MB", MIB), ("KB", KIB)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size} B"
