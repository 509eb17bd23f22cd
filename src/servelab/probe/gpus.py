"""What the GPUs are and how they connect, read from NVML and sysfs without loading them.

NVML says what each GPU is (architecture, memory, power limit, clocks, PCIe link, ECC, MIG,
virtualization, NVLinks) and how each pair connects (topology level, P2P status). sysfs adds
what NVML does not: the NUMA node and local CPUs of each GPU's PCI function and its IOMMU group.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.units import MILLIWATTS_PER_W
from servelab.probe.nvml import (
    NVML_NVLINK_MAX_LINKS,
    NvmlSource,
    P2PCap,
    clock_event_reason_names,
    normalize_pci_bus_id,
    nvlink_device_type_label,
    p2p_label,
    topology_label,
    virtualization_label,
)
from servelab.probe.sysfs import parse_cpulist, read_text

__all__ = [
    "GpuFacts",
    "GpuInventory",
    "GpuPair",
    "NvLinkFacts",
    "architecture_name",
    "collect_gpus",
]

# Architecture by compute capability major; minors that change the name are listed apart.
_ARCHITECTURE_BY_MAJOR = {
    3: "Kepler",
    5: "Maxwell",
    6: "Pascal",
    7: "Volta",  # 7.0 V100, 7.2 Xavier
    8: "Ampere",  # 8.0 A100, 8.6 A10/RTX 30, 8.7 Orin
    9: "Hopper",  # 9.0 H100/H200/GH200
    10: "Blackwell",  # 10.0 B200/GB200, 10.3 B300/GB300
    11: "Blackwell",  # 11.0 Thor
    12: "Blackwell",  # 12.0 RTX 50 / RTX PRO 6000 (SM120), 12.1 GB10
}
_ARCHITECTURE_BY_CAPABILITY = {(7, 5): "Turing", (8, 9): "Ada Lovelace"}


class NvLinkFacts(BaseModel):
    """One NVLink of a GPU and what it reaches."""

    model_config = ConfigDict(extra="forbid")

    link: int
    active: bool
    remote_pci_bus_id: str | None = Field(description="The peer's PCI address, sysfs form.")
    remote_device_type: str | None = Field(description="'gpu', 'switch', 'ibmnpu', 'unknown'.")


class GpuFacts(BaseModel):
    """One GPU as NVML and sysfs describe it, idle: clocks and PCIe link are as read now."""

    model_config = ConfigDict(extra="forbid")

    nvml_index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None = Field(description="Lower case with a 4-digit domain, as in sysfs.")
    compute_capability: str | None = Field(description="'9.0' for Hopper, '12.0' for SM120.")
    architecture: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    power_draw_w: float | None
    power_limit_w: float | None = Field(description="The enforced limit.")
    default_power_limit_w: float | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    mem_clock_mhz: int | None
    mem_clock_max_mhz: int | None
    clock_event_reasons: list[str] = Field(description="Active reasons, e.g. ['GpuIdle'].")
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    ecc_enabled: bool | None
    ecc_errors_uncorrected: int | None = Field(description="Since the driver loaded.")
    ecc_errors_corrected: int | None = Field(description="Since the driver loaded.")
    mig_enabled: bool | None
    virtualization_mode: str | None = Field(description="'none', 'passthrough', 'vgpu', ...")
    numa_node: int | None = Field(description="From sysfs; -1 is the kernel's 'unknown'.")
    local_cpus: list[int] | None = Field(description="From sysfs local_cpulist.")
    iommu_group: str | None
    nvlinks: list[NvLinkFacts] = Field(default_factory=list)
    cuda_index: int | None = Field(
        default=None, description="This GPU's index for CUDA, filled when torch is asked."
    )


class GpuPair(BaseModel):
    """How two GPUs reach each other, in `nvidia-smi topo` words."""

    model_config = ConfigDict(extra="forbid")

    a: int = Field(description="NVML index.")
    b: int = Field(description="NVML index.")
    topology: str | None = Field(description="NV# when NVLink connects them, else pcie_topology.")
    pcie_topology: str | None = Field(description="PIX, PXB, PHB, NODE or SYS.")
    p2p_read: str | None = Field(description="OK, CNS, GNS, TNS, DIS, NS or U.")
    p2p_write: str | None
    p2p_nvlink: str | None
    p2p_atomics: str | None
    nvlink_count: int = Field(description="NVLinks between them, direct or through NVSwitch.")

    @property
    def name(self) -> str:
        """How verdicts name the pair: 'gpu0-gpu1'."""
        return f"gpu{self.a}-gpu{self.b}"


class GpuInventory(BaseModel):
    """Every GPU NVML sees, and every pair of them."""

    model_config = ConfigDict(extra="forbid")

    driver_version: str | None
    cuda_driver_version: str | None = Field(description="The newest CUDA the driver runs: '12.8'.")
    nvml_version: str | None
    gpus: list[GpuFacts]
    pairs: list[GpuPair]


def architecture_name(major: int, minor: int) -> str | None:
    """The architecture of a compute capability: (9, 0) is Hopper, (12, 0) Blackwell."""
    return _ARCHITECTURE_BY_CAPABILITY.get((major, minor)) or _ARCHITECTURE_BY_MAJOR.get(major)


def collect_gpus(source: NvmlSource, *, sysfs_root: Path = Path("/")) -> GpuInventory:
    """Read every GPU and pair from `source`, and each GPU's NUMA facts under `sysfs_root`."""
    count = source.device_count()
    gpus = [_collect_gpu(source, index, sysfs_root) for index in range(count)]
    pairs = [
        _collect_pair(source, gpus[a], gpus[b]) for a in range(count) for b in range(a + 1, count)
    ]
    cuda = source.cuda_driver_version()
    return GpuInventory(
        driver_version=source.driver_version(),
        cuda_driver_version=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
        nvml_version=source.nvml_version(),
        gpus=gpus,
        pairs=pairs,
    )


def _collect_gpu(source: NvmlSource, index: int, sysfs_root: Path) -> GpuFacts:
    raw_bus_id = source.pci_bus_id(index)
    bus_id = None if raw_bus_id is None else normalize_pci_bus_id(raw_bus_id)
    capability = source.cuda_compute_capability(index)
    ecc_mode = source.ecc_mode(index)
    mig_mode = source.mig_mode(index)
    pci_dir = None if bus_id is None else sysfs_root / "sys/bus/pci/devices" / bus_id
    return GpuFacts(
        nvml_index=index,
        name=source.name(index),
        uuid=source.uuid(index),
        pci_bus_id=bus_id,
        compute_capability=None if capability is None else f"{capability[0]}.{capability[1]}",
        architecture=None if capability is None else architecture_name(*capability),
        memory_total_bytes=source.memory_total_bytes(index),
        memory_used_bytes=source.memory_used_bytes(index),
        power_draw_w=_watts(source.power_usage_mw(index)),
        power_limit_w=_watts(source.enforced_power_limit_mw(index)),
        default_power_limit_w=_watts(source.default_power_limit_mw(index)),
        sm_clock_mhz=source.sm_clock_mhz(index),
        sm_clock_max_mhz=source.sm_clock_max_mhz(index),
        mem_clock_mhz=source.mem_clock_mhz(index),
        mem_clock_max_mhz=source.mem_clock_max_mhz(index),
        clock_event_reasons=clock_event_reason_names(source.clock_event_reasons(index)),
        pcie_gen=source.pcie_gen(index),
        pcie_gen_max=source.pcie_gen_max(index),
        pcie_width=source.pcie_width(index),
        pcie_width_max=source.pcie_width_max(index),
        ecc_enabled=None if ecc_mode is None else ecc_mode == 1,
        ecc_errors_uncorrected=source.ecc_uncorrected_volatile(index),
        ecc_errors_corrected=source.ecc_corrected_volatile(index),
        mig_enabled=None if mig_mode is None else mig_mode == 1,
        virtualization_mode=virtualization_label(source.virtualization_mode(index)),
        numa_node=_read_int(pci_dir, "numa_node") if pci_dir else None,
        local_cpus=_read_cpulist(pci_dir, "local_cpulist") if pci_dir else None,
        iommu_group=_link_name(pci_dir / "iommu_group") if pci_dir else None,
        nvlinks=_collect_nvlinks(source, index),
    )


def _collect_nvlinks(source: NvmlSource, index: int) -> list[NvLinkFacts]:
    links = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        state = source.nvlink_state(index, link)
        if state is None:
            continue
        remote = source.nvlink_remote_pci_bus_id(index, link)
        links.append(
            NvLinkFacts(
                link=link,
                active=state == 1,
                remote_pci_bus_id=None if remote is None else normalize_pci_bus_id(remote),
                remote_device_type=nvlink_device_type_label(
                    source.nvlink_remote_device_type(index, link)
                ),
            )
        )
    return links


def _collect_pair(source: NvmlSource, a: GpuFacts, b: GpuFacts) -> GpuPair:
    i, j = a.nvml_index, b.nvml_index
    pcie = topology_label(source.topology_common_ancestor(i, j))
    links = _nvlink_count(a, b)
    return GpuPair(
        a=i,
        b=j,
        topology=f"NV{links}" if links else pcie,
        pcie_topology=pcie,
        p2p_read=p2p_label(source.p2p_status(i, j, P2PCap.READ)),
        p2p_write=p2p_label(source.p2p_status(i, j, P2PCap.WRITE)),
        p2p_nvlink=p2p_label(source.p2p_status(i, j, P2PCap.NVLINK)),
        p2p_atomics=p2p_label(source.p2p_status(i, j, P2PCap.ATOMICS)),
        nvlink_count=links,
    )


def _nvlink_count(a: GpuFacts, b: GpuFacts) -> int:
    """Active links from a straight to b; else, as nvidia-smi counts NVSwitch systems, the
    links both have into the switch fabric (every GPU on it reaches every other)."""
    active_a = [link for link in a.nvlinks if link.active]
    direct = sum(
        1
        for link in active_a
        if link.remote_device_type != "switch"
        and link.remote_pci_bus_id is not None
        and link.remote_pci_bus_id == b.pci_bus_id
    )
    if direct:
        return direct
    to_switch_a = sum(1 for link in active_a if link.remote_device_type == "switch")
    to_switch_b = sum(
        1 for link in b.nvlinks if link.active and link.remote_device_type == "switch"
    )
    return min(to_switch_a, to_switch_b)


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / MILLIWATTS_PER_W


def _read_int(folder: Path, name: str) -> int | None:
    text = read_text(folder, name)
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _read_cpulist(folder: Path, name: str) -> list[int] | None:
    """A kernel cpulist ('0-15,32-47') as CPU numbers; None if absent or unreadable."""
    text = read_text(folder, name)
    if not text:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def _link_name(path: Path) -> str | None:
    """The last component of a symlink's target (iommu_group -> .../iommu_groups/17 is '17')."""
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return None
