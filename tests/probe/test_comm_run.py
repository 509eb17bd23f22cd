"""run_comm with CUDA hidden or faked, and the parts of its plan that need no GPU."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

import servelab.probe.comm as comm
from servelab.probe.comm import (
    CPU_PART,
    NEEDS_TWO_GPUS,
    NO_CUDA,
    NO_DEVICES,
    NO_GRAPHS_ON_CPU,
    NO_TORCH,
    PARTS,
    CommResults,
    CpuRates,
    CudaDevice,
    cuda_uuid_map,
    run_comm,
)
from tests.ci import require_module


@pytest.fixture(autouse=True)
def _no_cpu_measurement(monkeypatch):
    """The CPU part is measured for real in test_comm_cpu; here it only has to be called."""
    monkeypatch.setattr(comm, "measure_cpu", lambda **_kw: CpuRates(cores=1, torch_threads=1))


def test_importing_the_comm_package_does_not_import_torch():
    code = (
        "import sys, servelab.probe.comm, servelab.probe.comm.worker, servelab.model.gpus; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_without_cuda_every_part_is_skipped_with_the_reason(monkeypatch):
    """All but the kernel launches, measured eager on the CPU, and the graph said missing."""
    torch = require_module("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # whatever this host has
    heard: list[str] = []
    results = run_comm(progress=heard.append)
    expected = {part: NO_CUDA for part in PARTS if part != "launch"}
    assert results.skipped == expected | {"launch:graph": NO_GRAPHS_ON_CPU}
    assert results.errors == {}
    assert results.devices == []
    assert results.memory_copy is None and results.p2p is None and results.allreduce is None
    assert results.torch_version == str(torch.__version__)
    [launch] = results.launch or []
    assert launch.device == "cpu" and launch.graph_us_per_kernel is None
    assert heard == [
        "the CPU: copy bandwidth, matmul rate and op dispatch by thread count",
        "kernel launch latency on the CPU (eager only: no CUDA graphs without CUDA)",
    ]
    assert results.cpu == CpuRates(cores=1, torch_threads=1)
    assert cuda_uuid_map() == {}
    # The result survives a JSON round trip, as the store will keep it.
    assert CommResults.model_validate_json(results.model_dump_json()) == results


def test_without_torch_every_part_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    results = run_comm()
    assert results.skipped == dict.fromkeys((*PARTS, CPU_PART), NO_TORCH)
    assert cuda_uuid_map() == {}


def test_one_gpu_skips_the_pairwise_parts(monkeypatch):
    torch = require_module("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    device = CudaDevice(index=0, name="NVIDIA H200", uuid="GPU-x", compute_capability="9.0")
    monkeypatch.setattr(comm, "_cuda_devices", lambda: [device])
    ran: list[list[object]] = []
    monkeypatch.setattr(comm, "_single_device_parts", lambda _r, devices, *_a: ran.append(devices))
    results = run_comm()
    assert ran == [[torch.device("cuda", 0)]]
    assert results.skipped == {"p2p": NEEDS_TWO_GPUS, "allreduce": NEEDS_TWO_GPUS}
    assert results.errors == {}


def test_unreadable_devices_are_an_error_not_an_exception(monkeypatch):
    torch = require_module("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    def broken() -> list[CudaDevice]:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(comm, "_cuda_devices", broken)
    results = run_comm()
    assert results.errors == {"devices": "RuntimeError: CUDA driver initialization failed"}
    assert results.skipped == dict.fromkeys(PARTS, NO_DEVICES)


def test_a_failing_measurement_is_recorded_not_raised():
    results = CommResults()
    with comm._recorded(results, "memory_copy:cuda:3"):
        raise RuntimeError("CUDA error: out of memory")
    assert results.errors == {"memory_copy:cuda:3": "RuntimeError: CUDA error: out of memory"}


class _FakeCUuuid:
    """torch >= 2.4 returns a _CUuuid whose str() is the bare UUID."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def test_torch_uuids_become_nvml_uuids():
    bare = str(uuid.UUID(int=0x5A3F1C2B_0000_4000_8000_0123456789AB))
    assert comm._nvml_uuid(_FakeCUuuid(bare)) == f"GPU-{bare}"
    assert comm._nvml_uuid(f"GPU-{bare}") == f"GPU-{bare}"  # older torch: a prefixed string
    assert comm._nvml_uuid("MIG-abc") == "MIG-abc"
