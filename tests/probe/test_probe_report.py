"""The probe assembled: the CLI with NVML hidden, on a recorded GPU and on this machine as it
is, rendering, and the verdicts on measurements and on the host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import servelab.probe.collect
import servelab.probe.nvml
from servelab.cli import app
from servelab.cli.probe import write_probe_files
from servelab.probe.comm.results import (
    AllReduceResult,
    BandwidthPoint,
    CommResults,
    MemoryCopyResult,
    NcclSetup,
    P2PResult,
)
from servelab.probe.comm_verdicts import comm_verdicts
from servelab.probe.gpu_verdicts import gpu_verdicts
from servelab.probe.host import HostFacts, NumaNode
from servelab.probe.host_verdicts import host_verdicts
from servelab.probe.nvml import RecordedSource, open_nvml_with_reason
from servelab.probe.report import NvmlStatus, ProbeReport
from servelab.probe.verdict import Severity
from servelab.probe.virt import VirtFacts
from tests.probe.test_gpus import inventory, load, vm_sysfs

SERVELAB = [sys.executable, "-m", "servelab"]
NO_DRIVER = "libnvidia-ml.so.1 could not be loaded (no NVIDIA driver here)"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVELAB, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML is missing, as on a machine without an NVIDIA driver, whatever this host has."""
    for module in (servelab.probe.collect, servelab.probe.nvml):
        monkeypatch.setattr(module, "open_nvml_with_reason", lambda: (None, NO_DRIVER))


def test_probe_without_a_gpu_gives_host_facts_and_exit_0(tmp_path: Path, no_nvml: None):
    result = CliRunner().invoke(app, ["probe", "--json", "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "servelab.probe/1"
    assert document["host"]["logical_cpus"] >= 1
    assert document["nvml"] == {"available": False, "reason": NO_DRIVER}
    assert document["gpus"] is None
    assert [v["code"] for v in document["verdicts"]].count("no-nvidia-gpu") == 1
    assert json.loads((tmp_path / "p/probe.json").read_text()) == document
    assert "No NVIDIA GPU visible" in (tmp_path / "p/probe.txt").read_text()


def test_probe_table_output_names_the_verdict(no_nvml: None):
    result = CliRunner().invoke(app, ["probe"])
    assert result.exit_code == 0
    assert "Host" in result.stdout
    assert "No NVIDIA GPU visible" in result.stdout


def test_probe_of_a_gpu_machine_lists_its_gpus(monkeypatch: pytest.MonkeyPatch):
    h200 = RecordedSource(load("h200_single.json"))
    monkeypatch.setattr(servelab.probe.collect, "open_nvml_with_reason", lambda: (h200, None))
    result = CliRunner().invoke(app, ["probe", "--json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["nvml"]["available"] is True
    assert [gpu["name"] for gpu in document["gpus"]["gpus"]] == ["NVIDIA H200"]
    assert "no-nvidia-gpu" not in [v["code"] for v in document["verdicts"]]


def test_probe_of_this_machine_says_what_nvml_sees_here():
    source, reason = open_nvml_with_reason()
    gpus_here = 0 if source is None else source.device_count()
    if source is not None:
        source.close()
    result = _run("probe", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    codes = [v["code"] for v in document["verdicts"]]
    if source is None:
        assert document["nvml"] == {"available": False, "reason": reason}
        assert document["gpus"] is None and "no-nvidia-gpu" in codes
    else:
        assert document["nvml"]["available"] is True
        assert len(document["gpus"]["gpus"]) == gpus_here
        assert ("no-nvidia-gpu" in codes) == (gpus_here == 0)


def test_bad_out_is_a_one_line_error(tmp_path: Path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    result = _run("probe", "--out", str(not_a_folder))
    assert result.returncode == 2
    assert result.stderr == f"error: --out {not_a_folder} exists and is not a folder\n"


def test_record_without_nvml_is_a_one_line_error(tmp_path: Path, no_nvml: None):
    result = CliRunner().invoke(app, ["probe", "--record-nvml", str(tmp_path / "n.json")])
    assert result.exit_code == 2
    assert result.stderr == f"error: --record-nvml: NVML is not available ({NO_DRIVER})\n"
    assert not (tmp_path / "n.json").exists()


def _host(nodes: int = 1, affinity: list[int] | None = None) -> HostFacts:
    return HostFacts(
        hostname="h",
        cpu_model="cpu",
        logical_cpus=8 * nodes,
        physical_cores=8 * nodes,
        sockets=nodes,
        hypervisor_flag=False,
        memory_bytes=1 << 36,
        numa_nodes=[
            NumaNode(id=n, cpus=list(range(8 * n, 8 * n + 8)), distances=[10], memory_bytes=None)
            for n in range(nodes)
        ],
        kernel_release="6.8.0",
        kernel_version=None,
        affinity=affinity,
    )


def _virt(vm: str | None = None, container: str | None = None) -> VirtFacts:
    return VirtFacts(
        vm=vm, container=container, gpu_virtualization=None, summary="s", evidence=["e"]
    )


def test_host_verdicts():
    assert host_verdicts(_host(), _virt()) == []
    vm = host_verdicts(_host(), _virt(vm="kvm"))
    assert [v.code for v in vm] == ["virtual-machine"]
    assert [v.code for v in host_verdicts(_host(), _virt(container="docker"))] == ["container"]
    spans = host_verdicts(_host(nodes=2, affinity=list(range(16))), _virt())
    assert [v.code for v in spans] == ["process-spans-numa-nodes"]
    assert host_verdicts(_host(nodes=2, affinity=list(range(8))), _virt()) == []


def _points(small_us: float, large_us: float) -> list[BandwidthPoint]:
    return [
        BandwidthPoint(
            size_bytes=size,
            time_us=t,
            min_time_us=t,
            max_time_us=t,
            bandwidth_gb_s=size / t / 1e3,
        )
        for size, t in ((12 * 1024, small_us), (16 << 20, large_us))
    ]


def test_comm_verdicts_fire_on_the_story_and_not_on_a_good_machine():
    story = CommResults(
        memory_copy=[
            MemoryCopyResult(
                device="cuda:0",
                buffer_bytes=1 << 30,
                bytes_moved=2 << 30,
                time_us=2000.0,
                min_time_us=2000.0,
                max_time_us=2000.0,
                bandwidth_gb_s=1073.7,
                datasheet_bandwidth_gb_s=1600.0,
                fraction_of_datasheet=0.67,
            )
        ],
        p2p=[
            P2PResult(
                gpu_a=0,
                gpu_b=1,
                p2p_access_reported=False,
                copy_verified=True,
                a_to_b=_points(13.7, 900.0),  # 18.6 GB/s, staged through the host
                b_to_a=_points(13.1, 880.0),
            )
        ],
        allreduce=AllReduceResult(
            world_size=8,
            backend="nccl",
            device_type="cuda",
            dtype="bfloat16",
            warmup_iterations=5,
            iterations=20,
            nccl=NcclSetup(transports=["SHM/direct/direct"], lines=["... via SHM/direct/direct"]),
        ),
    )
    pcie_gen5_x16 = {(0, 1): 63.0e9}
    by_code = {v.code: v for v in comm_verdicts(story, pcie_gen5_x16)}
    assert set(by_code) == {
        "memory-bandwidth-low",
        "p2p-access-denied",
        "p2p-copy-slow",
        "nccl-not-p2p",
    }
    assert by_code["p2p-access-denied"].severity is Severity.CRITICAL
    assert "30% of 63 GB/s" in by_code["p2p-copy-slow"].evidence[0]
    assert "13.7 µs" in by_code["p2p-copy-slow"].evidence[0]

    good = CommResults(
        p2p=[
            P2PResult(
                gpu_a=0,
                gpu_b=1,
                p2p_access_reported=True,
                copy_verified=True,
                a_to_b=_points(12.9, 57.7),  # two H200 over NV18, as measured
                b_to_a=_points(13.2, 58.9),
            )
        ],
        allreduce=AllReduceResult(
            world_size=2,
            backend="nccl",
            device_type="cuda",
            dtype="bfloat16",
            warmup_iterations=5,
            iterations=20,
            nccl=NcclSetup(transports=["P2P/CUMEM"]),
        ),
    )
    nv18 = {(0, 1): 450e9}
    assert comm_verdicts(good, nv18) == []
    assert comm_verdicts(good) == []  # no link known: the copies are not judged
    corrupt = good.model_copy(
        update={"p2p": [good.p2p[0].model_copy(update={"copy_verified": False})]}
    )
    assert [v.code for v in comm_verdicts(corrupt, nv18)] == ["p2p-copy-corrupt"]


def test_the_story_machine_renders_its_matrix_and_verdicts(tmp_path: Path):
    gpus = inventory(load("vm_8gpu_no_p2p.json"), vm_sysfs(tmp_path))
    report = ProbeReport(
        created_utc="2026-11-29T00:00:00+00:00",
        servelab_version="0",
        duration_s=0.1,
        host=_host(),
        virtualization=_virt(vm="kvm"),
        nvml=NvmlStatus(available=True),
        gpus=gpus,
        verdicts=gpu_verdicts(gpus, in_vm=True),
    )
    paths = write_probe_files(report, tmp_path / "out")
    text = paths[1].read_text()
    assert "GPU7" in text
    assert "PHB NS/NS" in text
    assert "CRITICAL" in text
    again = ProbeReport.model_validate_json(paths[0].read_text())
    assert again == report


def test_a_real_h200_recording_collects_and_judges(tmp_path: Path):
    """Recorded on an H200 in a VM with GPU passthrough, whose kernel hides NUMA (-1)."""
    root = tmp_path / "root"
    device = root / "sys/bus/pci/devices/0000:00:06.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("-1\n")
    (device / "local_cpulist").write_text("0-15\n")
    gpus = inventory(load("h200_recorded.json"), root)
    (gpu,) = gpus.gpus
    assert (gpu.name, gpu.compute_capability, gpu.architecture) == ("NVIDIA H200", "9.0", "Hopper")
    assert (gpu.pcie_gen_max, gpu.pcie_width_max, gpu.power_limit_w) == (5, 16, 700.0)
    assert gpu.virtualization_mode == "passthrough"
    assert gpu.numa_node == -1
    assert gpus.pairs == []
    codes = {v.code: v.severity for v in gpu_verdicts(gpus, process_cpus=list(range(16)))}
    assert codes == {"numa-unknown": Severity.WARNING}


def test_two_h200_over_nvlink_get_no_false_alarm():
    """Measured on two H200 joined by NV18: the copy rules must judge by the link."""
    from servelab.probe.collect import _link_bandwidths

    document = Path(__file__).parents[2] / "benchmarks/gpu/results/h200x2-probe/probe-comm.json"
    report = ProbeReport.model_validate_json(document.read_text())
    assert report.gpus is not None and report.comm is not None
    links = _link_bandwidths(report.gpus)
    assert links == {(0, 1): 450e9}
    codes = {v.code for v in comm_verdicts(report.comm, links)}
    codes |= {v.code for v in gpu_verdicts(report.gpus, in_vm=True)}
    assert "p2p-ok" in codes
    assert not codes & {"p2p-copy-slow", "vm-flat-topology", "nccl-not-p2p"}
    assert report.comm.allreduce is not None
    assert report.comm.allreduce.nccl is not None
    assert report.comm.allreduce.nccl.transports == ["P2P/CUMEM"]
