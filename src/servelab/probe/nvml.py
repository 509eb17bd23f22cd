"""A narrow view of NVML, so the GPU probe can be tested on recordings instead of GPUs.

`NvmlSource` is the few calls the probe makes. Every call may answer None: NVML says "not
supported" for many queries on some GPUs, drivers and VMs, and the probe reports what it could
read instead of failing. `PynvmlSource` asks the driver through pynvml (imported only inside
functions, so importing servelab stays light); `RecordedSource` replays the JSON document that
`record` writes from any source, so a real machine can be captured once and tested anywhere.

Values are NVML's own units and codes (mW, MHz, enum values); `gpus` converts them, and the
label functions here turn codes into the words `nvidia-smi topo -m` and `-p2p` print.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = [
    "CLOCK_EVENT_REASONS",
    "NVML_NVLINK_MAX_LINKS",
    "RECORDING_FORMAT",
    "NvmlSource",
    "P2PCap",
    "PynvmlSource",
    "RecordedSource",
    "clock_event_reason_names",
    "normalize_pci_bus_id",
    "nvlink_device_type_label",
    "open_nvml",
    "open_nvml_with_reason",
    "p2p_label",
    "record",
    "topology_label",
    "virtualization_label",
]

RECORDING_FORMAT = "servelab-nvml-recording/1"

NVML_NVLINK_MAX_LINKS = 36
"""pynvml.NVML_NVLINK_MAX_LINKS: links to ask about per GPU (those a GPU lacks answer None)."""

# pynvml.NVML_TOPOLOGY_* -> the label `nvidia-smi topo -m` prints for a pair of GPUs.
# INTERNAL is two GPUs on one board behind its own switch (Tesla K80): nvidia-smi's level 0,
# "a single PCIe switch on a dual GPU board", which it shows as PIX.
_TOPOLOGY_LABELS = {
    0: "PIX",  # NVML_TOPOLOGY_INTERNAL
    10: "PIX",  # NVML_TOPOLOGY_SINGLE: at most one PCIe bridge
    20: "PXB",  # NVML_TOPOLOGY_MULTIPLE: several bridges, no host bridge
    30: "PHB",  # NVML_TOPOLOGY_HOSTBRIDGE: through a PCIe host bridge (the CPU)
    40: "NODE",  # NVML_TOPOLOGY_NODE: between host bridges within one NUMA node
    50: "SYS",  # NVML_TOPOLOGY_SYSTEM: across the SMP interconnect between NUMA nodes
}

# pynvml.NVML_P2P_STATUS_* -> the `nvidia-smi topo -p2p` legend. DISABLED_BY_REGKEY has no
# label there; "DIS" keeps it apart from NS because a driver setting, not hardware, causes it.
_P2P_LABELS = {
    0: "OK",  # NVML_P2P_STATUS_OK
    1: "CNS",  # NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
    2: "GNS",  # NVML_P2P_STATUS_GPU_NOT_SUPPORTED
    3: "TNS",  # NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
    4: "DIS",  # NVML_P2P_STATUS_DISABLED_BY_REGKEY
    5: "NS",  # NVML_P2P_STATUS_NOT_SUPPORTED
    6: "U",  # NVML_P2P_STATUS_UNKNOWN
}

# pynvml.NVML_GPU_VIRTUALIZATION_MODE_* -> the constant's suffix, lower case.
_VIRTUALIZATION_LABELS = {
    0: "none",  # bare metal, or a container on bare metal
    1: "passthrough",  # the whole GPU handed to a VM
    2: "vgpu",  # a vGPU slice inside a VM
    3: "host_vgpu",  # the hypervisor side of vGPU
    4: "host_vsga",  # the hypervisor side of vSGA
}

# pynvml.NVML_NVLINK_DEVICE_TYPE_* -> what sits at the far end of an NVLink.
_NVLINK_DEVICE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch", 0xFF: "unknown"}

CLOCK_EVENT_REASONS: dict[str, int] = {
    "GpuIdle": 0x1,
    "ApplicationsClocksSetting": 0x2,
    "SwPowerCap": 0x4,
    "HwSlowdown": 0x8,
    "SyncBoost": 0x10,
    "SwThermalSlowdown": 0x20,
    "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
    "DisplayClockSetting": 0x100,
    "BoardLimit": 0x200,
    "Reliability": 0x400,
}
"""Bits of nvmlDeviceGetCurrentClocksEventReasons, named as pynvml's nvmlClocksThrottleReason*."""


class P2PCap(StrEnum):
    """The peer-to-peer capability asked about (pynvml.NVML_P2P_CAPS_INDEX_*)."""

    READ = "read"
    WRITE = "write"
    NVLINK = "nvlink"
    ATOMICS = "atomics"


class NvmlSource(Protocol):
    """The NVML queries the GPU probe needs; None wherever NVML cannot answer."""

    def device_count(self) -> int: ...
    def driver_version(self) -> str | None: ...
    def nvml_version(self) -> str | None: ...
    def cuda_driver_version(self) -> int | None:
        """As NVML encodes it: 1000 * major + 10 * minor (12080 is CUDA 12.8)."""

    def name(self, index: int) -> str | None: ...
    def uuid(self, index: int) -> str | None: ...
    def pci_bus_id(self, index: int) -> str | None:
        """As NVML writes it: '00000000:18:00.0'."""

    def cuda_compute_capability(self, index: int) -> tuple[int, int] | None: ...
    def memory_total_bytes(self, index: int) -> int | None: ...
    def memory_used_bytes(self, index: int) -> int | None: ...
    def power_usage_mw(self, index: int) -> int | None: ...
    def enforced_power_limit_mw(self, index: int) -> int | None: ...
    def default_power_limit_mw(self, index: int) -> int | None: ...
    def sm_clock_mhz(self, index: int) -> int | None: ...
    def sm_clock_max_mhz(self, index: int) -> int | None: ...
    def mem_clock_mhz(self, index: int) -> int | None: ...
    def mem_clock_max_mhz(self, index: int) -> int | None: ...
    def clock_event_reasons(self, index: int) -> int | None:
        """The bitmask of CLOCK_EVENT_REASONS active now."""

    def pcie_gen(self, index: int) -> int | None: ...
    def pcie_gen_max(self, index: int) -> int | None: ...
    def pcie_width(self, index: int) -> int | None: ...
    def pcie_width_max(self, index: int) -> int | None: ...
    def ecc_mode(self, index: int) -> int | None:
        """The current ECC mode: 1 enabled, 0 disabled (NVML_FEATURE_*)."""

    def ecc_uncorrected_volatile(self, index: int) -> int | None:
        """Uncorrected memory errors, all locations, since the driver loaded."""

    def ecc_corrected_volatile(self, index: int) -> int | None:
        """Corrected memory errors, all locations, since the driver loaded."""

    def mig_mode(self, index: int) -> int | None:
        """The current MIG mode: 1 enabled, 0 disabled (NVML_DEVICE_MIG_*)."""

    def virtualization_mode(self, index: int) -> int | None: ...
    def nvlink_state(self, index: int, link: int) -> int | None:
        """1 active, 0 inactive, None where the GPU has no such link."""

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> str | None: ...
    def nvlink_remote_device_type(self, index: int, link: int) -> int | None: ...
    def topology_common_ancestor(self, a: int, b: int) -> int | None: ...
    def p2p_status(self, a: int, b: int, cap: P2PCap) -> int | None: ...
    def close(self) -> None: ...


# The per-GPU calls that take only an index: the keys of a recorded device.
_DEVICE_CALLS = (
    "name",
    "uuid",
    "pci_bus_id",
    "cuda_compute_capability",
    "memory_total_bytes",
    "memory_used_bytes",
    "power_usage_mw",
    "enforced_power_limit_mw",
    "default_power_limit_mw",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "mem_clock_mhz",
    "mem_clock_max_mhz",
    "clock_event_reasons",
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "ecc_mode",
    "ecc_uncorrected_volatile",
    "ecc_corrected_volatile",
    "mig_mode",
    "virtualization_mode",
)


def topology_label(level: int | None) -> str | None:
    """The `nvidia-smi topo -m` word for an NVML topology level (NVLink is decided elsewhere)."""
    if level is None:
        return None
    return _TOPOLOGY_LABELS.get(level, f"level-{level}")


def p2p_label(status: int | None) -> str | None:
    """The `nvidia-smi topo -p2p` word for an NVML P2P status; codes it does not know are U."""
    if status is None:
        return None
    return _P2P_LABELS.get(status, "U")


def virtualization_label(mode: int | None) -> str | None:
    """'none', 'passthrough', 'vgpu', 'host_vgpu' or 'host_vsga'."""
    if mode is None:
        return None
    return _VIRTUALIZATION_LABELS.get(mode, f"mode-{mode}")


def nvlink_device_type_label(device_type: int | None) -> str | None:
    """'gpu', 'switch', 'ibmnpu' or 'unknown': what an NVLink reaches."""
    if device_type is None:
        return None
    return _NVLINK_DEVICE_TYPES.get(device_type, "unknown")


def clock_event_reason_names(mask: int | None) -> list[str]:
    """The names of the active bits; a bit this table lacks is kept as hex so it is not lost."""
    if mask is None:
        return []
    names = [name for name, bit in CLOCK_EVENT_REASONS.items() if mask & bit]
    known = 0
    for bit in CLOCK_EVENT_REASONS.values():
        known |= bit
    if mask & ~known:
        names.append(hex(mask & ~known))
    return names


def normalize_pci_bus_id(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' as sysfs and lspci -D write it: '0000:18:00.0'."""
    domain, sep, rest = bus_id.strip().partition(":")
    if not sep:
        return bus_id.strip().lower()
    return f"{int(domain, 16):04x}:{rest.lower()}"


_T = TypeVar("_T")


class PynvmlSource:
    """NVML through pynvml. Build it with `open_nvml`, which initialises NVML; close it after."""

    def __init__(self) -> None:
        import pynvml

        self._nvml = pynvml
        self._handles: dict[int, Any] = {}

    def _ask(self, call: Callable[..., _T], *args: Any) -> _T | None:
        """One NVML query; any NVML error (not supported, no permission, old driver) is None."""
        try:
            return call(*args)
        except self._nvml.NVMLError:
            return None

    def _device(self, index: int, call: Callable[..., _T], *args: Any) -> _T | None:
        handle = self._handle(index)
        if handle is None:
            return None
        return self._ask(call, handle, *args)

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._ask(self._nvml.nvmlDeviceGetHandleByIndex, index)
        return self._handles[index]

    def _constant(self, name: str) -> int:
        # Some pynvml releases define NVML_P2P_CAPS_INDEX_READ as a one-element tuple.
        value = getattr(self._nvml, name)
        return int(value[0] if isinstance(value, tuple) else value)

    def device_count(self) -> int:
        return self._ask(self._nvml.nvmlDeviceGetCount) or 0

    def driver_version(self) -> str | None:
        return self._ask(self._nvml.nvmlSystemGetDriverVersion)

    def nvml_version(self) -> str | None:
        return self._ask(self._nvml.nvmlSystemGetNVMLVersion)

    def cuda_driver_version(self) -> int | None:
        return self._ask(self._nvml.nvmlSystemGetCudaDriverVersion)

    def name(self, index: int) -> str | None:
        return self._device(index, self._nvml.nvmlDeviceGetName)

    def uuid(self, index: int) -> str | None:
        return self._device(index, self._nvml.nvmlDeviceGetUUID)

    def pci_bus_id(self, index: int) -> str | None:
        info = self._device(index, self._nvml.nvmlDeviceGetPciInfo)
        return None if info is None else info.busId

    def cuda_compute_capability(self, index: int) -> tuple[int, int] | None:
        capability = self._device(index, self._nvml.nvmlDeviceGetCudaComputeCapability)
        return None if capability is None else (int(capability[0]), int(capability[1]))

    def memory_total_bytes(self, index: int) -> int | None:
        memory = self._device(index, self._nvml.nvmlDeviceGetMemoryInfo)
        return None if memory is None else int(memory.total)

    def memory_used_bytes(self, index: int) -> int | None:
        memory = self._device(index, self._nvml.nvmlDeviceGetMemoryInfo)
        return None if memory is None else int(memory.used)

    def power_usage_mw(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetPowerUsage)

    def enforced_power_limit_mw(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetEnforcedPowerLimit)

    def default_power_limit_mw(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetPowerManagementDefaultLimit)

    def sm_clock_mhz(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetClockInfo, self._nvml.NVML_CLOCK_SM)

    def sm_clock_max_mhz(self, index: int) -> int | None:
        nvml = self._nvml
        return self._device(index, nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM)

    def mem_clock_mhz(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetClockInfo, self._nvml.NVML_CLOCK_MEM)

    def mem_clock_max_mhz(self, index: int) -> int | None:
        nvml = self._nvml
        return self._device(index, nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_MEM)

    def clock_event_reasons(self, index: int) -> int | None:
        # *EventReasons is the current name; older drivers and pynvml only have *ThrottleReasons.
        current = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = None if current is None else self._device(index, current)
        if reasons is None:
            reasons = self._device(index, self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        return reasons

    def pcie_gen(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetCurrPcieLinkGeneration)

    def pcie_gen_max(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetMaxPcieLinkGeneration)

    def pcie_width(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetCurrPcieLinkWidth)

    def pcie_width_max(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetMaxPcieLinkWidth)

    def ecc_mode(self, index: int) -> int | None:
        modes = self._device(index, self._nvml.nvmlDeviceGetEccMode)
        return None if modes is None else int(modes[0])

    def _ecc_total(self, index: int, error_type: int) -> int | None:
        nvml = self._nvml
        return self._device(
            index, nvml.nvmlDeviceGetTotalEccErrors, error_type, nvml.NVML_VOLATILE_ECC
        )

    def ecc_uncorrected_volatile(self, index: int) -> int | None:
        return self._ecc_total(index, self._nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)

    def ecc_corrected_volatile(self, index: int) -> int | None:
        return self._ecc_total(index, self._nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED)

    def mig_mode(self, index: int) -> int | None:
        modes = self._device(index, self._nvml.nvmlDeviceGetMigMode)
        return None if modes is None else int(modes[0])

    def virtualization_mode(self, index: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetVirtualizationMode)

    def nvlink_state(self, index: int, link: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetNvLinkState, link)

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> str | None:
        info = self._device(index, self._nvml.nvmlDeviceGetNvLinkRemotePciInfo, link)
        return None if info is None else info.busId

    def nvlink_remote_device_type(self, index: int, link: int) -> int | None:
        return self._device(index, self._nvml.nvmlDeviceGetNvLinkRemoteDeviceType, link)

    def topology_common_ancestor(self, a: int, b: int) -> int | None:
        handle_a, handle_b = self._handle(a), self._handle(b)
        if handle_a is None or handle_b is None:
            return None
        return self._ask(self._nvml.nvmlDeviceGetTopologyCommonAncestor, handle_a, handle_b)

    def p2p_status(self, a: int, b: int, cap: P2PCap) -> int | None:
        handle_a, handle_b = self._handle(a), self._handle(b)
        if handle_a is None or handle_b is None:
            return None
        index = self._constant(f"NVML_P2P_CAPS_INDEX_{cap.name}")
        return self._ask(self._nvml.nvmlDeviceGetP2PStatus, handle_a, handle_b, index)

    def close(self) -> None:
        """Shut NVML down (it counts inits, so other users in this process are unaffected)."""
        self._handles.clear()
        self._ask(self._nvml.nvmlShutdown)


def open_nvml_with_reason() -> tuple[PynvmlSource | None, str | None]:
    """NVML if this machine has it, else None and why: no GPU is a normal machine, not an error."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (the nvidia-ml-py package)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return None, "libnvidia-ml.so.1 could not be loaded (no NVIDIA driver here)"
    except pynvml.NVMLError as error:
        return None, f"NVML did not initialise: {error}"
    return PynvmlSource(), None


def open_nvml() -> NvmlSource | None:
    """NVML if this machine has it; `open_nvml_with_reason` also says why not."""
    source, _ = open_nvml_with_reason()
    return source


def record(source: NvmlSource, *, note: str | None = None) -> dict[str, Any]:
    """Everything the probe asks `source`, as a JSON-ready document `RecordedSource` replays."""
    count = source.device_count()
    devices: list[dict[str, Any]] = []
    for index in range(count):
        device: dict[str, Any] = {call: getattr(source, call)(index) for call in _DEVICE_CALLS}
        capability = device["cuda_compute_capability"]
        if capability is not None:
            device["cuda_compute_capability"] = list(capability)
        links = []
        for link in range(NVML_NVLINK_MAX_LINKS):
            state = source.nvlink_state(index, link)
            if state is None:
                continue
            links.append(
                {
                    "link": link,
                    "state": state,
                    "remote_pci_bus_id": source.nvlink_remote_pci_bus_id(index, link),
                    "remote_device_type": source.nvlink_remote_device_type(index, link),
                }
            )
        device["nvlinks"] = links
        devices.append(device)
    pairs = [
        {
            "a": a,
            "b": b,
            "topology": source.topology_common_ancestor(a, b),
            "p2p": {cap.value: source.p2p_status(a, b, cap) for cap in P2PCap},
        }
        for a in range(count)
        for b in range(a + 1, count)
    ]
    return {
        "format": RECORDING_FORMAT,
        "note": note,
        "driver_version": source.driver_version(),
        "nvml_version": source.nvml_version(),
        "cuda_driver_version": source.cuda_driver_version(),
        "devices": devices,
        "pairs": pairs,
    }


class RecordedSource:
    """Replays a `record` document: the probe sees the recorded machine, no GPU needed.

    Pairs are recorded once (a < b) and answered in both orders.
    """

    def __init__(self, document: dict[str, Any]) -> None:
        if document.get("format") != RECORDING_FORMAT:
            raise ValueError(
                f"not an NVML recording ({RECORDING_FORMAT}): {document.get('format')}"
            )
        self.note: str | None = document.get("note")
        self._document = document
        self._devices: list[dict[str, Any]] = document.get("devices", [])
        self._links = [
            {link["link"]: link for link in device.get("nvlinks", [])} for device in self._devices
        ]
        self._pairs = {(pair["a"], pair["b"]): pair for pair in document.get("pairs", [])}

    @classmethod
    def from_path(cls, path: Path) -> RecordedSource:
        """Load a recording written as JSON."""
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def _field(self, index: int, key: str) -> Any:
        return self._devices[index].get(key)

    def _link(self, index: int, link: int, key: str) -> Any:
        entry = self._links[index].get(link)
        return None if entry is None else entry.get(key)

    def _pair(self, a: int, b: int) -> dict[str, Any]:
        return self._pairs.get((a, b)) or self._pairs.get((b, a)) or {}

    def device_count(self) -> int:
        return len(self._devices)

    def driver_version(self) -> str | None:
        return self._document.get("driver_version")

    def nvml_version(self) -> str | None:
        return self._document.get("nvml_version")

    def cuda_driver_version(self) -> int | None:
        return self._document.get("cuda_driver_version")

    def name(self, index: int) -> str | None:
        return self._field(index, "name")

    def uuid(self, index: int) -> str | None:
        return self._field(index, "uuid")

    def pci_bus_id(self, index: int) -> str | None:
        return self._field(index, "pci_bus_id")

    def cuda_compute_capability(self, index: int) -> tuple[int, int] | None:
        capability = self._field(index, "cuda_compute_capability")
        return None if capability is None else (int(capability[0]), int(capability[1]))

    def memory_total_bytes(self, index: int) -> int | None:
        return self._field(index, "memory_total_bytes")

    def memory_used_bytes(self, index: int) -> int | None:
        return self._field(index, "memory_used_bytes")

    def power_usage_mw(self, index: int) -> int | None:
        return self._field(index, "power_usage_mw")

    def enforced_power_limit_mw(self, index: int) -> int | None:
        return self._field(index, "enforced_power_limit_mw")

    def default_power_limit_mw(self, index: int) -> int | None:
        return self._field(index, "default_power_limit_mw")

    def sm_clock_mhz(self, index: int) -> int | None:
        return self._field(index, "sm_clock_mhz")

    def sm_clock_max_mhz(self, index: int) -> int | None:
        return self._field(index, "sm_clock_max_mhz")

    def mem_clock_mhz(self, index: int) -> int | None:
        return self._field(index, "mem_clock_mhz")

    def mem_clock_max_mhz(self, index: int) -> int | None:
        return self._field(index, "mem_clock_max_mhz")

    def clock_event_reasons(self, index: int) -> int | None:
        return self._field(index, "clock_event_reasons")

    def pcie_gen(self, index: int) -> int | None:
        return self._field(index, "pcie_gen")

    def pcie_gen_max(self, index: int) -> int | None:
        return self._field(index, "pcie_gen_max")

    def pcie_width(self, index: int) -> int | None:
        return self._field(index, "pcie_width")

    def pcie_width_max(self, index: int) -> int | None:
        return self._field(index, "pcie_width_max")

    def ecc_mode(self, index: int) -> int | None:
        return self._field(index, "ecc_mode")

    def ecc_uncorrected_volatile(self, index: int) -> int | None:
        return self._field(index, "ecc_uncorrected_volatile")

    def ecc_corrected_volatile(self, index: int) -> int | None:
        return self._field(index, "ecc_corrected_volatile")

    def mig_mode(self, index: int) -> int | None:
        return self._field(index, "mig_mode")

    def virtualization_mode(self, index: int) -> int | None:
        return self._field(index, "virtualization_mode")

    def nvlink_state(self, index: int, link: int) -> int | None:
        return self._link(index, link, "state")

    def nvlink_remote_pci_bus_id(self, index: int, link: int) -> str | None:
        return self._link(index, link, "remote_pci_bus_id")

    def nvlink_remote_device_type(self, index: int, link: int) -> int | None:
        return self._link(index, link, "remote_device_type")

    def topology_common_ancestor(self, a: int, b: int) -> int | None:
        return self._pair(a, b).get("topology")

    def p2p_status(self, a: int, b: int, cap: P2PCap) -> int | None:
        return self._pair(a, b).get("p2p", {}).get(cap.value)

    def close(self) -> None:
        """Nothing to release; here so callers treat every source alike."""
