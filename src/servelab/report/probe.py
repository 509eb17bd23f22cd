"""Rich rendering of a probe report: facts, GPU matrix, measurements, verdicts."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servelab.core.units import GIB, KIB, MIB
from servelab.probe.comm.results import CommResults
from servelab.probe.gpus import GpuFacts, GpuInventory
from servelab.probe.report import ProbeReport
from servelab.probe.sysfs import format_cpulist
from servelab.report.verdicts import render_verdicts

__all__ = ["render_probe"]


def render_probe(report: ProbeReport) -> RenderableType:
    """The whole report, in reading order: host, GPUs, pairs, measurements, verdicts."""
    parts: list[RenderableType] = [_host(report)]
    if report.gpus is not None and report.gpus.gpus:
        parts += [_gpus(report.gpus), *_pairs(report.gpus)]
    if report.comm is not None:
        parts += list(_comm(report.comm))
    parts.append(render_verdicts(report.verdicts))
    return Group(*parts)


def _host(report: ProbeReport) -> Table:
    host, virt = report.host, report.virtualization
    table = Table(title="Host", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    cores = f"{host.logical_cpus or '?'} logical CPUs"
    if host.physical_cores:
        cores += f", {host.physical_cores} cores"
    if host.sockets:
        cores += f", {host.sockets} socket(s)"
    table.add_row("CPU", escape(f"{host.cpu_model or 'unknown'} ({cores})"))
    if host.memory_bytes:
        table.add_row("memory", f"{host.memory_bytes / GIB:,.1f} GiB")
    for node in host.numa_nodes:
        distances = " ".join(map(str, node.distances))
        table.add_row(
            f"NUMA node {node.id}", f"CPUs {format_cpulist(node.cpus)}; distances {distances}"
        )
    if not host.numa_nodes:
        table.add_row("NUMA", "no nodes exposed by the kernel")
    if host.affinity is not None:
        table.add_row("this process", f"may run on CPUs {format_cpulist(host.affinity)}")
    table.add_row("kernel", escape(host.kernel_release or "unknown"))
    table.add_row("virtualization", escape(virt.summary))
    gpus = report.gpus
    if gpus is not None:
        table.add_row(
            "driver",
            f"{gpus.driver_version or '?'} (CUDA {gpus.cuda_driver_version or '?'}, "
            f"NVML {gpus.nvml_version or '?'})",
        )
    elif report.nvml.reason:
        table.add_row("NVML", escape(report.nvml.reason))
    return table


def _gpus(inventory: GpuInventory) -> Table:
    """One column per GPU, one row per fact: stays readable from 1 to 8 GPUs."""
    table = Table(title="GPUs", title_justify="left")
    table.add_column("")
    for gpu in inventory.gpus:
        cuda = "" if gpu.cuda_index is None else f" (cuda {gpu.cuda_index})"
        table.add_column(f"GPU{gpu.nvml_index}{cuda}")
    rows = {
        "name": lambda g: escape(g.name or "?"),
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
    for label, cell in rows.items():
        table.add_row(label, *(cell(gpu) for gpu in inventory.gpus))
    return table


def _pairs(inventory: GpuInventory) -> Iterator[Table]:
    if not inventory.pairs:
        return
    n = len(inventory.gpus)
    by_pair = {(p.a, p.b): p for p in inventory.pairs} | {(p.b, p.a): p for p in inventory.pairs}
    table = Table(
        title="GPU pairs: topology, P2P read/write (nvidia-smi topo words)", title_justify="left"
    )
    table.add_column("")
    for b in range(n):
        table.add_column(f"GPU{b}", justify="center")
    for a in range(n):
        cells = []
        for b in range(n):
            pair = by_pair.get((a, b))
            if a == b or pair is None:
                cells.append("X" if a == b else "?")
                continue
            usable = pair.p2p_read == "OK" and pair.p2p_write == "OK"
            style = "green" if usable or pair.p2p_nvlink == "OK" else "red"
            cells.append(
                f"{pair.topology or '?'} [{style}]{pair.p2p_read or '?'}/{pair.p2p_write or '?'}"
                f"[/{style}]"
            )
        table.add_row(f"GPU{a}", *cells)
    yield table


def _comm(comm: CommResults) -> Iterator[RenderableType]:
    if comm.memory_copy or comm.matmul or comm.host_copy:
        table = Table(title="Measured on each GPU", title_justify="left")
        for column in ("device", "what", "measured", "datasheet", "share"):
            table.add_column(column, justify="right" if column != "what" else "left")
        for m in comm.memory_copy or []:
            table.add_row(
                m.device,
                f"memory copy, {m.buffer_bytes / GIB:g} GiB buffer (read + written)",
                f"{m.bandwidth_gb_s:,.0f} GB/s",
                _opt(m.datasheet_bandwidth_gb_s, "GB/s"),
                _share(m.fraction_of_datasheet),
            )
        for mm in comm.matmul or []:
            table.add_row(
                mm.device,
                f"{mm.dtype} matmul {mm.mnk}³",
                f"{mm.tflop_s:,.0f} TFLOP/s",
                _opt(mm.datasheet_tflop_s, "TFLOP/s"),
                _share(mm.fraction_of_datasheet),
            )
        for h in comm.host_copy or []:
            kind = "pinned" if h.pinned else "pageable"
            table.add_row(
                h.device,
                f"host→device / device→host, {kind}, {h.size_bytes / 2**20:g} MiB",
                f"{h.h2d_gb_s:,.1f} / {h.d2h_gb_s:,.1f} GB/s",
                "",
                "",
            )
        yield table
    if comm.p2p:
        table = Table(title="GPU↔GPU copies (µs per copy, GB/s)", title_justify="left")
        table.add_column("pair")
        table.add_column("P2P access")
        table.add_column("verified")
        sizes = [p.size_bytes for p in comm.p2p[0].a_to_b]
        for size in sizes:
            table.add_column(_size(size), justify="right")
        for pair in comm.p2p:
            for label, points in (
                (f"{pair.gpu_a}→{pair.gpu_b}", pair.a_to_b),
                (f"{pair.gpu_b}→{pair.gpu_a}", pair.b_to_a),
            ):
                by_size = {p.size_bytes: p for p in points}
                table.add_row(
                    f"cuda {label}",
                    "yes" if pair.p2p_access_reported else "[red]no[/red]",
                    "yes" if pair.copy_verified else "[red]NO[/red]",
                    *(
                        f"{by_size[s].time_us:,.1f} µs {by_size[s].bandwidth_gb_s:,.1f}"
                        if s in by_size
                        else "-"
                        for s in sizes
                    ),
                )
        yield table
    if comm.allreduce is not None:
        yield _allreduce(comm)
    if comm.skipped:
        yield Text(
            "not measured: " + "; ".join(f"{k}: {v}" for k, v in comm.skipped.items()),
            style="dim",
        )


def _allreduce(comm: CommResults) -> RenderableType:
    result = comm.allreduce
    assert result is not None
    title = f"all-reduce, {result.world_size} ranks, {result.backend}, {result.dtype}"
    if result.nccl is not None:
        title += f", NCCL {result.nccl.version or '?'}"
        title += f", transport {', '.join(result.nccl.transports) or 'not reported'}"
    table = Table(title=escape(title), title_justify="left")
    for column in ("size", "count", "time µs", "algbw GB/s", "busbw GB/s"):
        table.add_column(column, justify="right")
    for point in result.points:
        table.add_row(
            _size(point.size_bytes),
            f"{point.count:,}",
            f"{point.time_us:,.1f}",
            f"{point.algbw_gb_s:,.2f}",
            f"{point.busbw_gb_s:,.2f}",
        )
    if result.error:
        return Group(table, Text(f"stopped early: {result.error}", style="red"))
    return table


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
