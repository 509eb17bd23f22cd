"""collect_gpus on recorded machines and synthetic sysfs trees; builders the verdict tests share."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from servelab.probe.gpus import GpuInventory, architecture_name, collect_gpus
from servelab.probe.nvml import RecordedSource

DATA = Path(__file__).parent / "data"
MIB = 1 << 20


def load(name: str) -> dict[str, Any]:
    """A recording under tests/probe/data, as a fresh dict the test may change."""
    return json.loads((DATA / name).read_text())


def write_sysfs(root: Path, devices: dict[str, tuple[str, str, str | None]]) -> Path:
    """PCI functions under root/sys: bus id -> (numa_node, local_cpulist, iommu group or None)."""
    groups = root / "sys/kernel/iommu_groups"
    for bus_id, (numa_node, cpulist, group) in devices.items():
        device = root / "sys/bus/pci/devices" / bus_id
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{numa_node}\n")
        (device / "local_cpulist").write_text(f"{cpulist}\n")
        if group is not None:
            (groups / group).mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../../../kernel/iommu_groups/{group}", device / "iommu_group")
    return root


def vm_sysfs(root: Path) -> Path:
    """The story's VM: every GPU's NUMA node unknown, all 64 vCPUs local to each."""
    return write_sysfs(root, {f"0000:0{i + 1}:00.0": ("-1", "0-63", str(10 + i)) for i in range(8)})


def nvlink_box(*, gpus: int = 8, links: int = 18) -> dict[str, Any]:
    """A clean HGX-style box built from the H200: NVSwitch links, P2P OK, NODE/SYS PCIe."""
    document = load("h200_single.json")
    document["note"] = "synthetic: an 8-GPU NVSwitch box for tests"
    template = document["devices"][0]
    document["devices"] = []
    for i in range(gpus):
        device = copy.deepcopy(template)
        device["uuid"] = f"GPU-00000000-0000-0000-0000-00000000010{i}"
        device["pci_bus_id"] = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
        device["nvlinks"] = [
            {"link": n, "state": 1, "remote_pci_bus_id": None, "remote_device_type": 2}
            for n in range(links)
        ]
        document["devices"].append(device)
    document["pairs"] = [
        {
            "a": a,
            "b": b,
            "topology": 40 if a // 4 == b // 4 else 50,
            "p2p": {"read": 0, "write": 0, "nvlink": 0, "atomics": 0},
        }
        for a in range(gpus)
        for b in range(a + 1, gpus)
    ]
    return document


def nvlink_box_sysfs(root: Path, *, gpus: int = 8) -> Path:
    """Two NUMA nodes, GPUs 0-3 on node 0 (CPUs 0-31), 4-7 on node 1 (CPUs 32-63)."""
    return write_sysfs(
        root,
        {
            f"0000:{0x18 + 0x10 * i:02x}:00.0": (
                str(i // 4),
                "0-31" if i < 4 else "32-63",
                str(i),
            )
            for i in range(gpus)
        },
    )


def inventory(document: dict[str, Any], sysfs_root: Path) -> GpuInventory:
    return collect_gpus(RecordedSource(document), sysfs_root=sysfs_root)


def test_h200_facts(tmp_path: Path):
    root = write_sysfs(tmp_path, {"0000:18:00.0": ("0", "0-3,8-9", "17")})
    found = inventory(load("h200_single.json"), root)

    assert found.driver_version == "570.133.20"
    assert found.cuda_driver_version == "12.8"
    assert found.nvml_version == "12.570.133.20"
    assert found.pairs == []
    [gpu] = found.gpus
    assert gpu.nvml_index == 0
    assert gpu.name == "NVIDIA H200"
    assert gpu.pci_bus_id == "0000:18:00.0"
    assert gpu.compute_capability == "9.0"
    assert gpu.architecture == "Hopper"
    assert gpu.memory_total_bytes == 143771 * MIB
    assert gpu.power_limit_w == 700.0
    assert gpu.default_power_limit_w == 700.0
    assert gpu.power_draw_w == 74.0
    assert (gpu.sm_clock_max_mhz, gpu.mem_clock_max_mhz) == (1980, 3201)
    assert gpu.clock_event_reasons == ["GpuIdle"]
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert gpu.ecc_enabled is True
    assert (gpu.ecc_errors_uncorrected, gpu.ecc_errors_corrected) == (0, 0)
    assert gpu.mig_enabled is False
    assert gpu.virtualization_mode == "none"
    assert gpu.numa_node == 0
    assert gpu.local_cpus == [0, 1, 2, 3, 8, 9]
    assert gpu.iommu_group == "17"
    assert len(gpu.nvlinks) == 18
    assert all(link.active and link.remote_device_type == "switch" for link in gpu.nvlinks)
    assert gpu.cuda_index is None


def test_missing_sysfs_gives_none(tmp_path: Path):
    [gpu] = inventory(load("h200_single.json"), tmp_path).gpus
    assert (gpu.numa_node, gpu.local_cpus, gpu.iommu_group) == (None, None, None)


def test_vm_facts_keep_unknown_numa_node(tmp_path: Path):
    found = inventory(load("vm_8gpu_no_p2p.json"), vm_sysfs(tmp_path))

    assert len(found.gpus) == 8
    assert len(found.pairs) == 28
    assert found.cuda_driver_version == "12.9"
    for gpu in found.gpus:
        assert gpu.name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        assert gpu.compute_capability == "12.0"
        assert gpu.architecture == "Blackwell"
        assert gpu.power_limit_w == 600.0
        assert gpu.virtualization_mode == "passthrough"
        assert gpu.numa_node == -1
        assert gpu.local_cpus == list(range(64))
        assert gpu.nvlinks == []
    assert [gpu.pci_bus_id for gpu in found.gpus] == [f"0000:0{i}:00.0" for i in range(1, 9)]
    assert [gpu.iommu_group for gpu in found.gpus] == [str(10 + i) for i in range(8)]
    for pair in found.pairs:
        assert pair.a < pair.b
        assert (pair.topology, pair.pcie_topology) == ("PHB", "PHB")
        assert (pair.p2p_read, pair.p2p_write, pair.p2p_nvlink, pair.p2p_atomics) == ("NS",) * 4
        assert pair.nvlink_count == 0


def test_nvswitch_pairs_read_nv18(tmp_path: Path):
    found = inventory(nvlink_box(), nvlink_box_sysfs(tmp_path))

    assert {pair.topology for pair in found.pairs} == {"NV18"}
    assert {pair.nvlink_count for pair in found.pairs} == {18}
    pcie = {(pair.a, pair.b): pair.pcie_topology for pair in found.pairs}
    assert pcie[(0, 3)] == "NODE"
    assert pcie[(3, 4)] == "SYS"
    assert [gpu.numa_node for gpu in found.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_direct_nvlinks_counted_per_peer(tmp_path: Path):
    """Three GPUs: 0 and 1 joined by four links, 2 joined to nothing: NV4 and plain PCIe."""
    document = nvlink_box(gpus=3)
    devices = document["devices"]
    bus = [device["pci_bus_id"] for device in devices]
    for me, peer in ((0, 1), (1, 0)):
        devices[me]["nvlinks"] = [
            {"link": n, "state": 1, "remote_pci_bus_id": bus[peer], "remote_device_type": 0}
            for n in range(4)
        ] + [{"link": 4, "state": 0, "remote_pci_bus_id": bus[peer], "remote_device_type": 0}]
    devices[2]["nvlinks"] = []
    found = inventory(document, tmp_path)

    topology = {(pair.a, pair.b): (pair.topology, pair.nvlink_count) for pair in found.pairs}
    assert topology == {(0, 1): ("NV4", 4), (0, 2): ("NODE", 0), (1, 2): ("NODE", 0)}
    assert [link.active for link in found.gpus[0].nvlinks] == [True] * 4 + [False]
    assert found.gpus[0].nvlinks[0].remote_pci_bus_id == found.gpus[1].pci_bus_id


def test_unsupported_values_stay_none(tmp_path: Path):
    document = load("h200_single.json")
    device = document["devices"][0]
    for key in ("cuda_compute_capability", "ecc_mode", "mig_mode", "power_usage_mw", "pci_bus_id"):
        device[key] = None
    device["clock_event_reasons"] = None
    [gpu] = inventory(document, tmp_path).gpus

    assert gpu.compute_capability is None and gpu.architecture is None
    assert gpu.ecc_enabled is None and gpu.mig_enabled is None
    assert gpu.power_draw_w is None
    assert gpu.pci_bus_id is None and gpu.numa_node is None
    assert gpu.clock_event_reasons == []


@pytest.mark.parametrize(
    ("capability", "name"),
    [
        ((7, 0), "Volta"),
        ((7, 5), "Turing"),
        ((8, 0), "Ampere"),
        ((8, 6), "Ampere"),
        ((8, 7), "Ampere"),
        ((8, 9), "Ada Lovelace"),
        ((9, 0), "Hopper"),
        ((10, 0), "Blackwell"),
        ((10, 3), "Blackwell"),
        ((12, 0), "Blackwell"),
        ((12, 1), "Blackwell"),
        ((99, 0), None),
    ],
)
def test_architecture_name(capability: tuple[int, int], name: str | None):
    assert architecture_name(*capability) == name


def test_inventory_json_round_trip(tmp_path: Path):
    found = inventory(load("vm_8gpu_no_p2p.json"), vm_sysfs(tmp_path))
    assert GpuInventory.model_validate_json(found.model_dump_json()) == found
