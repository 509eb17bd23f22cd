"""The NVML interface: labels against pynvml's constants, opening, pynvml errors, recordings."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servelab.probe import nvml
from servelab.probe.gpus import collect_gpus
from servelab.probe.nvml import (
    CLOCK_EVENT_REASONS,
    P2PCap,
    PynvmlSource,
    RecordedSource,
    clock_event_reason_names,
    normalize_pci_bus_id,
    open_nvml,
    open_nvml_with_reason,
    p2p_label,
    record,
    topology_label,
    virtualization_label,
)
from tests.ci import require_module

DATA = Path(__file__).parent / "data"

pynvml = require_module("pynvml")


def _p2p_constant(name: str) -> int:
    value = getattr(pynvml, name)
    return value[0] if isinstance(value, tuple) else value


def test_topology_labels_follow_pynvml():
    assert topology_label(pynvml.NVML_TOPOLOGY_INTERNAL) == "PIX"
    assert topology_label(pynvml.NVML_TOPOLOGY_SINGLE) == "PIX"
    assert topology_label(pynvml.NVML_TOPOLOGY_MULTIPLE) == "PXB"
    assert topology_label(pynvml.NVML_TOPOLOGY_HOSTBRIDGE) == "PHB"
    assert topology_label(pynvml.NVML_TOPOLOGY_NODE) == "NODE"
    assert topology_label(pynvml.NVML_TOPOLOGY_SYSTEM) == "SYS"
    assert topology_label(None) is None
    assert topology_label(35) == "level-35"


def test_p2p_labels_follow_pynvml():
    assert p2p_label(pynvml.NVML_P2P_STATUS_OK) == "OK"
    assert p2p_label(pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED) == "CNS"
    assert p2p_label(pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED) == "GNS"
    assert p2p_label(pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED) == "TNS"
    assert p2p_label(pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY) == "DIS"
    assert p2p_label(pynvml.NVML_P2P_STATUS_NOT_SUPPORTED) == "NS"
    assert p2p_label(pynvml.NVML_P2P_STATUS_UNKNOWN) == "U"
    assert p2p_label(77) == "U"
    assert p2p_label(None) is None


def test_p2p_caps_and_link_count_follow_pynvml():
    assert [_p2p_constant(f"NVML_P2P_CAPS_INDEX_{cap.name}") for cap in P2PCap] == [0, 1, 2, 3]
    assert nvml.NVML_NVLINK_MAX_LINKS == pynvml.NVML_NVLINK_MAX_LINKS
    assert nvml.nvlink_device_type_label(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU) == "gpu"
    assert nvml.nvlink_device_type_label(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH) == "switch"
    assert nvml.nvlink_device_type_label(pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN) == "unknown"


def test_virtualization_labels_follow_pynvml():
    assert virtualization_label(pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE) == "none"
    assert virtualization_label(pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH) == "passthrough"
    assert virtualization_label(pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU) == "vgpu"
    assert virtualization_label(pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU) == "host_vgpu"
    assert virtualization_label(pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA) == "host_vsga"
    assert virtualization_label(None) is None


def test_clock_event_bits_follow_pynvml():
    for name, bit in CLOCK_EVENT_REASONS.items():
        assert getattr(pynvml, f"nvmlClocksThrottleReason{name}") == bit, name
        event_name = f"nvmlClocksEventReason{name}"
        if hasattr(pynvml, event_name):
            assert getattr(pynvml, event_name) == bit, name


def test_clock_event_reason_names():
    mask = pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert clock_event_reason_names(mask) == ["GpuIdle", "HwThermalSlowdown"]
    assert clock_event_reason_names(0) == []
    assert clock_event_reason_names(None) == []
    assert clock_event_reason_names(0x4 | 0x10000) == ["SwPowerCap", "0x10000"]


@pytest.mark.parametrize(
    ("nvml_form", "sysfs_form"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("00000000:AB:00.0", "0000:ab:00.0"),
        ("00000001:C1:00.0", "0001:c1:00.0"),
        ("0000:18:00.0", "0000:18:00.0"),
    ],
)
def test_normalize_pci_bus_id(nvml_form: str, sysfs_form: str):
    assert normalize_pci_bus_id(nvml_form) == sysfs_form


def test_open_nvml_does_not_raise_here():
    """No NVIDIA GPU on the test machines: None and a reason. On a GPU machine: a live source."""
    source, reason = open_nvml_with_reason()
    if source is None:
        assert reason
        assert open_nvml() is None
    else:
        assert reason is None
        assert source.device_count() >= 1
        source.close()


def test_open_nvml_without_pynvml(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    source, reason = open_nvml_with_reason()
    assert source is None
    assert reason is not None and "nvidia-ml-py" in reason


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
    ],
)
def test_open_nvml_when_init_fails(monkeypatch: pytest.MonkeyPatch, code: int, words: str):
    def fail() -> None:
        raise pynvml.NVMLError(code)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    source, reason = open_nvml_with_reason()
    assert source is None
    assert reason is not None and words in reason
    assert open_nvml() is None


class _FakeDriver:
    """pynvml's functions answered in memory: what a GPU with few supported queries says."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.p2p_indexes: list[Any] = []
        self.shutdowns = 0
        answers = {
            "nvmlDeviceGetCount": lambda: 2,
            "nvmlDeviceGetHandleByIndex": self._handle,
            "nvmlDeviceGetName": lambda handle: f"GPU {handle}",
            "nvmlDeviceGetPowerUsage": self._not_supported,
            "nvmlDeviceGetCudaComputeCapability": lambda handle: (9, 0),
            "nvmlDeviceGetEccMode": lambda handle: [1, 0],
            "nvmlDeviceGetCurrentClocksEventReasons": self._no_function,
            "nvmlDeviceGetCurrentClocksThrottleReasons": lambda handle: 0x41,
            "nvmlDeviceGetNvLinkState": self._nvlink_state,
            "nvmlDeviceGetP2PStatus": self._p2p,
            "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: pynvml.NVML_TOPOLOGY_SYSTEM,
            "nvmlShutdown": self._shutdown,
        }
        for name, answer in answers.items():
            monkeypatch.setattr(pynvml, name, answer)

    @staticmethod
    def _handle(index: int) -> str:
        if index > 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return f"h{index}"

    @staticmethod
    def _not_supported(*_: Any) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    @staticmethod
    def _no_function(*_: Any) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    @staticmethod
    def _nvlink_state(handle: str, link: int) -> int:
        if link >= 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    def _p2p(self, a: str, b: str, index: Any) -> int:
        self.p2p_indexes.append(index)
        return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def _shutdown(self) -> None:
        self.shutdowns += 1


def test_pynvml_source_turns_errors_into_none(monkeypatch: pytest.MonkeyPatch):
    driver = _FakeDriver(monkeypatch)
    source = PynvmlSource()

    assert source.device_count() == 2
    assert source.name(0) == "GPU h0"
    assert source.name(5) is None  # no handle for that index
    assert source.power_usage_mw(0) is None
    assert source.cuda_compute_capability(1) == (9, 0)
    assert source.ecc_mode(0) == 1
    assert source.clock_event_reasons(0) == 0x41  # the older call, when the newer one is missing
    assert source.nvlink_state(0, 1) == 1
    assert source.nvlink_state(0, 2) is None
    assert source.topology_common_ancestor(0, 1) == pynvml.NVML_TOPOLOGY_SYSTEM
    assert [source.p2p_status(0, 1, cap) for cap in P2PCap] == [5, 5, 5, 5]
    assert driver.p2p_indexes == [0, 1, 2, 3]
    assert all(isinstance(index, int) for index in driver.p2p_indexes)
    source.close()
    assert driver.shutdowns == 1


def test_record_of_pynvml_source_tolerates_unsupported_calls(monkeypatch: pytest.MonkeyPatch):
    _FakeDriver(monkeypatch)

    def everything_else(*_: Any) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    for name in dir(pynvml):
        if name.startswith(("nvmlDeviceGet", "nvmlSystemGet")) and name not in (
            "nvmlDeviceGetCount",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetName",
            "nvmlDeviceGetNvLinkState",
            "nvmlDeviceGetP2PStatus",
            "nvmlDeviceGetTopologyCommonAncestor",
        ):
            monkeypatch.setattr(pynvml, name, everything_else)
    document = json.loads(json.dumps(record(PynvmlSource())))

    assert [device["name"] for device in document["devices"]] == ["GPU h0", "GPU h1"]
    assert document["devices"][0]["memory_total_bytes"] is None
    assert [link["link"] for link in document["devices"][0]["nvlinks"]] == [0, 1]
    assert document["pairs"] == [
        {"a": 0, "b": 1, "topology": 50, "p2p": {"read": 5, "write": 5, "nvlink": 5, "atomics": 5}}
    ]
    assert collect_gpus(RecordedSource(document)).pairs[0].topology == "SYS"


@pytest.mark.parametrize("name", ["h200_single.json", "vm_8gpu_no_p2p.json"])
def test_record_replay_round_trip(name: str, tmp_path: Path):
    original = json.loads((DATA / name).read_text())
    replayed = RecordedSource(original)

    again = record(replayed, note=replayed.note)
    assert again == original
    path = tmp_path / "recording.json"
    path.write_text(json.dumps(again))
    assert collect_gpus(RecordedSource.from_path(path)) == collect_gpus(replayed)


def test_recorded_pairs_answer_both_orders():
    source = RecordedSource(json.loads((DATA / "vm_8gpu_no_p2p.json").read_text()))
    assert source.topology_common_ancestor(3, 1) == source.topology_common_ancestor(1, 3) == 30
    assert source.p2p_status(7, 0, P2PCap.READ) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED


def test_fixtures_say_they_are_hand_written():
    for name in ("h200_single.json", "vm_8gpu_no_p2p.json"):
        assert "HAND-WRITTEN" in (RecordedSource.from_path(DATA / name).note or "")


def test_recorded_source_refuses_other_documents():
    with pytest.raises(ValueError, match="not an NVML recording"):
        RecordedSource({"devices": []})
