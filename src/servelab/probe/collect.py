"""`run_probe`: read the machine's facts, measure when asked, and judge them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from servelab import __version__
from servelab.model.gpus import gpu_for_nvml_name, pcie_bandwidth_bytes_s
from servelab.probe.comm.results import CommResults
from servelab.probe.comm_verdicts import comm_verdicts
from servelab.probe.cuda_init import check_cuda
from servelab.probe.cuda_verdicts import cuda_verdicts
from servelab.probe.gpu_verdicts import gpu_verdicts
from servelab.probe.gpus import GpuInventory, collect_gpus
from servelab.probe.host import read_host
from servelab.probe.host_verdicts import host_verdicts, no_gpu_verdict
from servelab.probe.nvml import open_nvml_with_reason
from servelab.probe.report import NvmlStatus, ProbeReport
from servelab.probe.virt import detect_virtualization

__all__ = ["CPU_ONLY", "run_probe"]

CPU_ONLY = "only the CPU's rates were measured (servelab probe --comm measures the GPUs)"


def run_probe(
    *,
    comm: bool = False,
    quick: bool = False,
    cuda: bool = True,
    cpu_rates: bool = False,
    cpu_threads: Sequence[int] | None = None,
    log_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProbeReport:
    """Facts (no load, seconds); with `comm`, the torch measurements too (a minute or two).

    A machine without an NVIDIA GPU or NVML is normal: its report holds the host facts
    and the verdict "no NVIDIA GPU visible". `cuda=False` skips the CUDA driver check (a
    child process and cuInit) for callers that read only the GPU facts. `cpu_rates`
    without `comm` measures the CPU alone, quickly, in a child process (the torch import
    and about a second): the rates an engine on the CPU is modelled with, at `cpu_threads`
    (default: OMP_NUM_THREADS if set, half the cores, all of them).
    """
    say = progress or (lambda _message: None)
    started = time.perf_counter()
    say("reading host facts")
    host = read_host()
    say("reading GPUs through NVML")
    inventory, nvml = _read_gpus()
    modes = {g.virtualization_mode for g in inventory.gpus} if inventory else set()
    guest_modes = sorted(m for m in modes if m not in (None, "none"))
    virt = detect_virtualization(nvml_mode=guest_modes[0] if guest_modes else None)
    verdicts = host_verdicts(host, virt)
    if inventory is None or not inventory.gpus:
        verdicts.append(no_gpu_verdict(nvml.reason))
    else:
        verdicts += gpu_verdicts(inventory, process_cpus=host.affinity, in_vm=virt.vm is not None)
    cuda_init = None
    if cuda:
        say("checking that CUDA initialises (cuInit, in a child process)")
        cuda_init = check_cuda()
    if cuda_init is not None:
        nvml_count = len(inventory.gpus) if inventory is not None else None
        verdicts += cuda_verdicts(
            cuda_init, nvml_count=nvml_count, in_container=virt.container is not None
        )
    comm_results = None
    if comm:
        from servelab.probe.comm import cuda_uuid_map, run_comm

        comm_results = run_comm(progress=say, quick=quick, log_dir=log_dir)
        if inventory is not None and comm_results.devices:
            uuids = cuda_uuid_map()
            for gpu in inventory.gpus:
                gpu.cuda_index = uuids.get(gpu.uuid or "")
        verdicts += comm_verdicts(comm_results, _link_bandwidths(inventory))
    elif cpu_rates:
        from servelab.probe.comm.cpu import measure_cpu_in_child

        say("measuring the CPU: copy bandwidth, matmul rate, op dispatch (a child process)")
        comm_results = CommResults(
            cpu=measure_cpu_in_child(cpu_threads, quick=True), skipped={"gpu": CPU_ONLY}
        )
    return ProbeReport(
        created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        servelab_version=__version__,
        duration_s=round(time.perf_counter() - started, 3),
        host=host,
        virtualization=virt,
        nvml=nvml,
        gpus=inventory,
        cuda=cuda_init,
        comm=comm_results,
        verdicts=sorted(verdicts, key=lambda v: v.severity.rank),
    )


def _read_gpus() -> tuple[GpuInventory | None, NvmlStatus]:
    source, reason = open_nvml_with_reason()
    if source is None:
        return None, NvmlStatus(available=False, reason=reason)
    try:
        inventory = collect_gpus(source)
    finally:
        source.close()
    if not inventory.gpus:
        return inventory, NvmlStatus(available=True, reason="NVML reports 0 devices")
    return inventory, NvmlStatus(available=True)


def _link_bandwidths(inventory: GpuInventory | None) -> dict[tuple[int, int], float]:
    """Each GPU pair's link per direction, keyed by CUDA indexes: NVLink from the catalogue
    (half its both-directions figure), else the narrower PCIe link's maximum."""
    if inventory is None:
        return {}
    by_nvml = {gpu.nvml_index: gpu for gpu in inventory.gpus}
    links: dict[tuple[int, int], float] = {}
    for pair in inventory.pairs:
        a, b = by_nvml[pair.a], by_nvml[pair.b]
        if a.cuda_index is None or b.cuda_index is None:
            continue
        spec = gpu_for_nvml_name(a.name or "")
        if pair.nvlink_count and spec is not None and spec.nvlink_bandwidth_bytes_s:
            rate = spec.nvlink_bandwidth_bytes_s / 2
        elif a.pcie_gen_max and a.pcie_width_max and b.pcie_gen_max and b.pcie_width_max:
            rate = pcie_bandwidth_bytes_s(
                min(a.pcie_gen_max, b.pcie_gen_max), min(a.pcie_width_max, b.pcie_width_max)
            )
        else:
            continue
        key = tuple(sorted((a.cuda_index, b.cuda_index)))
        links[(key[0], key[1])] = rate
    return links
