"""GPU verdicts: which fire, how severe, how pairs are grouped, on recorded machines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servelab.probe.gpu_verdicts import gpu_verdicts
from servelab.probe.verdict import Severity, Verdict
from tests.probe.test_gpus import (
    inventory,
    load,
    nvlink_box,
    nvlink_box_sysfs,
    vm_sysfs,
    write_sysfs,
)


def by_code(verdicts: list[Verdict]) -> dict[str, Verdict]:
    codes = [verdict.code for verdict in verdicts]
    assert len(codes) == len(set(codes)), codes
    return {verdict.code: verdict for verdict in verdicts}


def four_gpus(p2p: dict[tuple[int, int], int], *, topology: int = 30) -> dict[str, Any]:
    """Four PCIe GPUs (no NVLink) with the given P2P read/write status per pair; OK elsewhere."""
    document = nvlink_box(gpus=4)
    for device in document["devices"]:
        device["nvlinks"] = []
    for pair in document["pairs"]:
        status = p2p.get((pair["a"], pair["b"]), 0)
        pair["topology"] = topology
        pair["p2p"] = {"read": status, "write": status, "nvlink": 5, "atomics": status}
    return document


def test_story_vm(tmp_path: Path):
    """The story's VM: no P2P anywhere, a flat PHB tree, NUMA hidden, links idle at Gen1."""
    found = inventory(load("vm_8gpu_no_p2p.json"), vm_sysfs(tmp_path))
    verdicts = gpu_verdicts(found, process_cpus=list(range(64)), in_vm=True)
    codes = by_code(verdicts)

    assert set(codes) == {
        "p2p-not-supported",
        "vm-flat-topology",
        "numa-unknown",
        "pcie-link-below-max",
        "sm120-kernel-limits",
    }
    sm120 = codes["sm120-kernel-limits"]
    assert sm120.severity is Severity.INFO and len(sm120.subjects) == 8
    assert "100 KB of shared memory per SM against 228 KB on SM90/SM100" in sm120.title
    assert "SM120: at most 99 KB per block" in sm120.evidence[1]
    assert "#14311" in sm120.meaning and "servelab tune kernels" in sm120.action
    p2p = codes["p2p-not-supported"]
    assert p2p.severity is Severity.CRITICAL
    assert len(p2p.subjects) == 28
    assert p2p.subjects[0] == "gpu0-gpu1"
    assert (
        p2p.evidence[0] == "P2P read NS, write NS: every pair among GPUs 0,1,2,3,4,5,6,7 (28 pairs)"
    )
    assert "13.7 µs" in p2p.meaning
    assert "two all-reduces per layer" in p2p.meaning
    assert "NCCL_P2P_LEVEL" in p2p.action
    assert "servelab probe --comm" in p2p.action
    assert "no two GPUs" in p2p.action
    assert codes["vm-flat-topology"].severity is Severity.WARNING
    assert codes["numa-unknown"].severity is Severity.WARNING
    assert codes["numa-unknown"].subjects == [f"gpu{i}" for i in range(8)]
    assert "VM" in codes["numa-unknown"].meaning
    link = codes["pcie-link-below-max"]
    assert link.severity is Severity.INFO
    assert "under load" in link.meaning
    assert "Gen1 x16 of Gen5 x16" in link.evidence[0]
    ranks = [verdict.severity.rank for verdict in verdicts]
    assert ranks == sorted(ranks)


def test_passthrough_alone_marks_a_vm(tmp_path: Path):
    found = inventory(load("vm_8gpu_no_p2p.json"), vm_sysfs(tmp_path))
    assert "vm-flat-topology" in by_code(gpu_verdicts(found, in_vm=False))


def test_bare_metal_phb_is_a_topology_warning(tmp_path: Path):
    document = load("vm_8gpu_no_p2p.json")
    for device in document["devices"]:
        device["virtualization_mode"] = 0
    codes = by_code(gpu_verdicts(inventory(document, tmp_path)))

    assert "vm-flat-topology" not in codes
    assert codes["topology-phb"].severity is Severity.WARNING
    assert len(codes["topology-phb"].subjects) == 28
    assert "numa-unknown" not in codes  # no sysfs: unknown to us, not -1


def test_clean_nvlink_box_gives_only_ok_and_info(tmp_path: Path):
    found = inventory(nvlink_box(), nvlink_box_sysfs(tmp_path))
    verdicts = gpu_verdicts(found)

    assert verdicts
    assert {verdict.severity for verdict in verdicts} <= {Severity.OK, Severity.INFO}
    ok = by_code(verdicts)["p2p-ok"]
    assert ok.severity is Severity.OK
    assert ok.subjects == [f"gpu{i}" for i in range(8)]
    assert any("NV18 ×28" in line for line in ok.evidence)
    assert "sm120-kernel-limits" not in by_code(verdicts)  # Hopper has the shared memory


def test_single_gpu_has_no_pair_verdicts(tmp_path: Path):
    root = write_sysfs(tmp_path, {"0000:18:00.0": ("0", "0-31", "3")})
    assert gpu_verdicts(inventory(load("h200_single.json"), root)) == []


def test_p2p_islands_and_grouped_statuses(tmp_path: Path):
    """GPUs 0,1 and 2,3 have P2P among themselves; across, some pairs say NS and some CNS."""
    ns, cns = 5, 1
    document = four_gpus({(0, 2): ns, (0, 3): ns, (1, 2): cns, (1, 3): cns})
    codes = by_code(gpu_verdicts(inventory(document, tmp_path)))

    p2p = codes["p2p-not-supported"]
    assert p2p.severity is Severity.CRITICAL
    assert p2p.subjects == ["gpu0-gpu2", "gpu0-gpu3", "gpu1-gpu2", "gpu1-gpu3"]
    assert "P2P read NS, write NS: gpu0-gpu2, gpu0-gpu3 (2 pairs)" in p2p.evidence
    assert "P2P read CNS, write CNS: gpu1-gpu2, gpu1-gpu3 (2 pairs)" in p2p.evidence
    assert any(line.startswith("CNS: the chipset") for line in p2p.evidence)
    assert "GPUs 0,1 and GPUs 2,3" in p2p.action
    assert "p2p-ok" not in codes


def test_p2p_failing_over_nvlink_is_a_warning(tmp_path: Path):
    document = nvlink_box(gpus=2)
    document["pairs"][0]["p2p"] = {"read": 5, "write": 5, "nvlink": 5, "atomics": 5}
    p2p = by_code(gpu_verdicts(inventory(document, tmp_path)))["p2p-not-supported"]

    assert p2p.severity is Severity.WARNING
    assert "fabricmanager" in p2p.action


def test_unknown_p2p_status_gives_neither_ok_nor_failure(tmp_path: Path):
    document = four_gpus({})
    for pair in document["pairs"]:
        pair["p2p"] = {"read": None, "write": None, "nvlink": None, "atomics": None}
    codes = by_code(gpu_verdicts(inventory(document, tmp_path)))
    assert "p2p-ok" not in codes and "p2p-not-supported" not in codes


@pytest.mark.parametrize(
    ("level", "code", "severity"),
    [
        (50, "topology-sys", Severity.WARNING),
        (30, "topology-phb", Severity.WARNING),
        (40, "topology-node", Severity.INFO),
    ],
)
def test_topology_levels(tmp_path: Path, level: int, code: str, severity: Severity):
    codes = by_code(gpu_verdicts(inventory(four_gpus({}, topology=level), tmp_path)))
    assert codes[code].severity is severity
    assert len(codes[code].subjects) == 6
    assert codes["p2p-ok"].severity is Severity.OK


def test_process_cpus_outside_local_cpus(tmp_path: Path):
    found = inventory(nvlink_box(), nvlink_box_sysfs(tmp_path))

    remote = by_code(gpu_verdicts(found, process_cpus=list(range(64))))["cpu-affinity-not-local"]
    assert remote.severity is Severity.WARNING
    assert remote.subjects == [f"gpu{i}" for i in range(8)]
    assert "this process may run on CPUs 0-63" in remote.evidence
    assert "numactl" in remote.action and "taskset" in remote.action

    pinned = by_code(gpu_verdicts(found, process_cpus=list(range(8))))["cpu-affinity-not-local"]
    assert pinned.subjects == [f"gpu{i}" for i in range(4, 8)]
    assert "gpu4 (0000:58:00.0): local CPUs 32-63, NUMA node 1" in pinned.evidence


def test_power_limit_below_default(tmp_path: Path):
    document = load("h200_single.json")
    document["devices"][0]["enforced_power_limit_mw"] = 525000
    [verdict] = gpu_verdicts(inventory(document, tmp_path))

    assert (verdict.code, verdict.severity) == ("power-limit-below-default", Severity.WARNING)
    assert "enforced 525 W of 700 W default (75%)" in verdict.evidence[0]


@pytest.mark.parametrize(
    ("mask", "code", "severity"),
    [
        (0x1 | 0x8, "clock-slowdown", Severity.CRITICAL),  # HwSlowdown
        (0x40, "clock-slowdown", Severity.CRITICAL),  # HwThermalSlowdown
        (0x20, "clock-slowdown", Severity.CRITICAL),  # SwThermalSlowdown
        (0x4, "clock-limited", Severity.WARNING),  # SwPowerCap
        (0x10, "clock-limited", Severity.WARNING),  # SyncBoost
    ],
)
def test_clock_event_reasons(tmp_path: Path, mask: int, code: str, severity: Severity):
    document = load("h200_single.json")
    document["devices"][0]["clock_event_reasons"] = mask
    [verdict] = gpu_verdicts(inventory(document, tmp_path))
    assert (verdict.code, verdict.severity) == (code, severity)
    assert "GpuIdle" not in verdict.evidence[0]


@pytest.mark.parametrize("mask", [0x0, 0x1, 0x2, 0x3])
def test_idle_and_application_clocks_are_not_findings(tmp_path: Path, mask: int):
    document = load("h200_single.json")
    document["devices"][0]["clock_event_reasons"] = mask
    assert gpu_verdicts(inventory(document, tmp_path)) == []


def test_ecc_errors(tmp_path: Path):
    document = load("h200_single.json")
    document["devices"][0]["ecc_uncorrected_volatile"] = 2
    document["devices"][0]["ecc_corrected_volatile"] = 40
    codes = by_code(gpu_verdicts(inventory(document, tmp_path)))

    assert codes["ecc-uncorrected"].severity is Severity.CRITICAL
    assert "2 uncorrected" in codes["ecc-uncorrected"].evidence[0]
    assert codes["ecc-corrected"].severity is Severity.INFO


def test_mig_enabled(tmp_path: Path):
    document = load("h200_single.json")
    document["devices"][0]["mig_mode"] = 1
    [verdict] = gpu_verdicts(inventory(document, tmp_path))
    assert (verdict.code, verdict.severity) == ("mig-enabled", Severity.INFO)


def test_numa_unknown_on_bare_metal_blames_the_bios(tmp_path: Path):
    root = write_sysfs(tmp_path, {"0000:18:00.0": ("-1", "0-31", None)})
    [verdict] = gpu_verdicts(inventory(load("h200_single.json"), root))
    assert (verdict.code, verdict.severity) == ("numa-unknown", Severity.WARNING)
    assert "BIOS" in verdict.meaning
    assert verdict.evidence == ["gpu0 (0000:18:00.0): numa_node = -1"]
