"""Host facts from synthetic procfs/sysfs trees, and once from this machine."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from servelab.probe.host import HostFacts, NumaNode, read_host
from tests.probe.trees import (
    BARE_METAL,
    KVM_GUEST,
    RASPBERRY_PI_CPUINFO,
    cpuinfo_arm64,
    meminfo,
    write_tree,
)


def test_two_socket_bare_metal(tmp_path: Path):
    host = read_host(write_tree(tmp_path, BARE_METAL), affinity=[15, 0, 1, 1])
    assert host.cpu_model == "Intel(R) Xeon(R) Platinum 8480+"
    assert host.logical_cpus == 16
    assert host.physical_cores == 8
    assert host.sockets == 2
    assert host.hypervisor_flag is False
    assert host.memory_bytes == 1056760132 * 1024
    assert host.numa_nodes == [
        NumaNode(
            id=0,
            cpus=[0, 1, 2, 3, 8, 9, 10, 11],
            distances=[10, 21],
            memory_bytes=528327564 * 1024,
        ),
        NumaNode(
            id=1,
            cpus=[4, 5, 6, 7, 12, 13, 14, 15],
            distances=[21, 10],
            memory_bytes=528432568 * 1024,
        ),
    ]
    assert host.kernel_release == "6.8.0-45-generic"
    assert host.kernel_version is not None
    assert host.kernel_version.startswith("Linux version 6.8.0-45-generic (buildd@")
    assert host.hostname == "gpu-node-07"
    assert host.affinity == [0, 1, 15]


def test_synthetic_root_has_no_affinity_unless_given(tmp_path: Path):
    assert read_host(write_tree(tmp_path, BARE_METAL)).affinity is None


def test_vm_guest_sets_hypervisor_flag(tmp_path: Path):
    host = read_host(write_tree(tmp_path, KVM_GUEST))
    assert host.hypervisor_flag is True
    assert (host.logical_cpus, host.physical_cores, host.sockets) == (8, 8, 1)
    assert host.numa_nodes == []  # a guest kernel without NUMA exposes no node directory


def test_numa_node_ids_sort_numerically_and_ignore_other_entries(tmp_path: Path):
    tree = {
        "/sys/devices/system/node/node10/cpulist": "10\n",
        "/sys/devices/system/node/node2/cpulist": "2\n",
        "/sys/devices/system/node/node2/distance": "10\n",
        "/sys/devices/system/node/has_cpu": "2,10\n",
        "/sys/devices/system/node/power": None,
    }
    host = read_host(write_tree(tmp_path, tree))
    assert [(n.id, n.cpus) for n in host.numa_nodes] == [(2, [2]), (10, [10])]
    assert host.numa_nodes[1].distances == []
    assert host.numa_nodes[1].memory_bytes is None


def test_memoryless_and_cpuless_nodes(tmp_path: Path):
    """A CXL or HBM node has memory but no CPUs: an empty cpulist file."""
    tree = {
        "/sys/devices/system/node/node2/cpulist": "\n",
        "/sys/devices/system/node/node2/distance": "20 20 10\n",
        "/sys/devices/system/node/node2/meminfo": "Node 2 MemTotal:       67108864 kB\n",
    }
    (node,) = read_host(write_tree(tmp_path, tree)).numa_nodes
    assert node == NumaNode(id=2, cpus=[], distances=[20, 20, 10], memory_bytes=64 * 2**30)


def test_arm64_topology_comes_from_sysfs(tmp_path: Path):
    tree: dict[str, str | bytes | None] = {
        "/proc/cpuinfo": cpuinfo_arm64(cpus=4),
        "/sys/devices/system/cpu/online": "0-3\n",
    }
    for cpu in range(4):
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        tree[f"{topology}/physical_package_id"] = f"{cpu // 2}\n"
        tree[f"{topology}/core_id"] = f"{cpu % 2}\n"
    host = read_host(write_tree(tmp_path, tree))
    assert host.cpu_model is None  # arm64 servers name no model in cpuinfo
    assert host.logical_cpus == 4
    assert (host.physical_cores, host.sockets) == (4, 2)
    assert host.hypervisor_flag is False


def test_topology_unknown_when_sysfs_is_incomplete(tmp_path: Path):
    tree = {
        "/proc/cpuinfo": cpuinfo_arm64(cpus=2),
        "/sys/devices/system/cpu/online": "0-1\n",
        "/sys/devices/system/cpu/cpu0/topology/physical_package_id": "0\n",
        "/sys/devices/system/cpu/cpu0/topology/core_id": "0\n",
    }
    host = read_host(write_tree(tmp_path, tree))
    assert (host.physical_cores, host.sockets) == (None, None)


def test_cpu_model_falls_back_to_board_model(tmp_path: Path):
    host = read_host(write_tree(tmp_path, {"/proc/cpuinfo": RASPBERRY_PI_CPUINFO}))
    assert host.cpu_model == "Raspberry Pi 4 Model B Rev 1.4"
    assert host.logical_cpus == 2


def test_cpu_model_falls_back_to_hardware(tmp_path: Path):
    cpuinfo = RASPBERRY_PI_CPUINFO.replace("Model\t\t: Raspberry Pi 4 Model B Rev 1.4\n", "")
    host = read_host(write_tree(tmp_path, {"/proc/cpuinfo": cpuinfo}))
    assert host.cpu_model == "BCM2835"


def test_logical_cpus_from_sysfs_when_cpuinfo_is_missing(tmp_path: Path):
    host = read_host(write_tree(tmp_path, {"/sys/devices/system/cpu/online": "0-63,128-191\n"}))
    assert host.logical_cpus == 128
    assert host.cpu_model is None


def test_malformed_files_give_unknowns(tmp_path: Path):
    tree = {
        "/proc/meminfo": "MemFree:        1000 kB\n",
        "/sys/devices/system/cpu/online": "garbage\n",
        "/sys/devices/system/node/node0/cpulist": "0-x\n",
        "/sys/devices/system/node/node0/distance": "10 ?\n",
        "/sys/devices/system/node/node0/meminfo": "Node 0 MemFree: 5 kB\n",
    }
    host = read_host(write_tree(tmp_path, tree))
    assert host.memory_bytes is None
    assert host.logical_cpus is None
    assert host.numa_nodes == [NumaNode(id=0, cpus=[], distances=[10], memory_bytes=None)]


def test_meminfo_total(tmp_path: Path):
    host = read_host(write_tree(tmp_path, {"/proc/meminfo": meminfo(16384)}))
    assert host.memory_bytes == 16 * 2**20


def test_empty_tree_reads_as_unknown(tmp_path: Path):
    assert read_host(tmp_path) == HostFacts(
        hostname=None,
        cpu_model=None,
        logical_cpus=None,
        physical_cores=None,
        sockets=None,
        hypervisor_flag=False,
        memory_bytes=None,
        numa_nodes=[],
        kernel_release=None,
        kernel_version=None,
        affinity=None,
    )


@pytest.mark.timing
def test_this_machine_is_read_quickly():
    start = time.perf_counter()
    host = read_host()
    assert time.perf_counter() - start < 1.0
    if hasattr(os, "sched_getaffinity"):
        assert host.affinity  # the live system knows this process's CPUs
    HostFacts.model_validate_json(host.model_dump_json())
