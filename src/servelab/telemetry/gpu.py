"""GPU telemetry from NVML, stamped on the bench clock, while the load runs.

The story's GPUs showed 100% "utilization" at 55% of their power limit: NVML's utilization
only says a kernel was running, so the sampler also reads power against the enforced limit,
clocks and why they are held down (clock-event reasons), the energy counter (tokens per
joule) and, on Hopper and newer, GPM's SM utilization, occupancy, DRAM bandwidth and tensor
activity, which say how busy the SMs really were.

Three cadences on two threads: power, limit, utilization, clocks, reasons and energy at
10 Hz; GPM every 0.5 s (NVML wants its two samples more than 100 ms apart); PCIe TX/RX at
1 Hz on a thread of its own, because each of those reads blocks for about 20 ms.

`GpuReader` is the few NVML calls this needs, each raising `NvmlReadError` with NVML's
reason when it cannot answer; `PynvmlGpuReader` asks the driver. A field that fails is
None in its samples and its reason is recorded once per GPU. NVML indices follow PCI bus
order and ignore CUDA_VISIBLE_DEVICES; UUIDs avoid the ambiguity.

Power is nvmlDeviceGetPowerUsage, which drivers average over up to a second on recent GPUs,
so means are exact but peaks are smoothed; energy comes from the counter, not from power.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from servelab.core.clock import now_ns, wall_anchor
from servelab.core.errors import ConfigError
from servelab.core.units import MILLIWATTS_PER_W
from servelab.probe.nvml import PynvmlSource, clock_event_reason_names, open_nvml_with_reason
from servelab.telemetry._loop import ErrorLog, Periodic

__all__ = [
    "DEFAULT_GPM_INTERVAL_S",
    "DEFAULT_INTERVAL_S",
    "DEFAULT_PCIE_INTERVAL_S",
    "GpmSample",
    "GpmValues",
    "GpuInfo",
    "GpuReader",
    "GpuSample",
    "GpuSampler",
    "GpuTrace",
    "NvmlReadError",
    "PcieSample",
    "PynvmlGpuReader",
    "Sink",
    "open_gpu_reader",
    "resolve_gpus",
]

DEFAULT_INTERVAL_S = 0.1
DEFAULT_GPM_INTERVAL_S = 0.5
DEFAULT_PCIE_INTERVAL_S = 1.0

Sink = Callable[[list[dict[str, Any]]], None]
"""Where rows go as they are taken (the session appends them to telemetry.jsonl)."""

# GpmValues field -> pynvml constant, in the order they are asked for.
_GPM_METRICS = (
    ("sm_util_pct", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
    ("tensor_util_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
)


class NvmlReadError(Exception):
    """NVML could not answer a query; the message is its reason ('Not Supported', ...)."""


@dataclass(frozen=True, slots=True)
class GpmValues:
    """GPM metrics over the interval between two GPM samples, in percent (0-100)."""

    sm_util_pct: float | None
    sm_occupancy_pct: float | None
    dram_bw_util_pct: float | None
    tensor_util_pct: float | None


class GpuReader(Protocol):
    """The NVML queries the sampler makes; each raises NvmlReadError when NVML cannot answer."""

    def device_count(self) -> int: ...
    def uuid(self, index: int) -> str | None: ...
    def name(self, index: int) -> str | None: ...
    def power_mw(self, index: int) -> int: ...
    def power_limit_mw(self, index: int) -> int:
        """The enforced limit: what the GPU is held to now."""

    def utilization_pct(self, index: int) -> tuple[int, int]:
        """(GPU, memory) utilization: the time a kernel ran, and memory was read or written."""

    def sm_clock_mhz(self, index: int) -> int: ...
    def mem_clock_mhz(self, index: int) -> int: ...
    def clock_event_reasons(self, index: int) -> int:
        """The bitmask of servelab.probe.nvml.CLOCK_EVENT_REASONS active now."""

    def energy_mj(self, index: int) -> int:
        """Energy used since the driver loaded, in mJ."""

    def pcie_kb_s(self, index: int) -> tuple[int, int]:
        """(TX, RX) over the last 20 ms in NVML's KB/s; blocks for that long per direction."""

    def gpm_unsupported_reason(self, index: int) -> str | None:
        """None when GPM works on this GPU, else why not."""

    def gpm_metrics(self, index: int) -> GpmValues | None:
        """Takes a GPM sample: the values since the previous call, None on the first."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str | None
    name: str | None


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One 10 Hz reading of one GPU; None where NVML could not answer."""

    t_ns: int
    tick: int
    gpu: int
    power_w: float | None
    power_limit_w: float | None
    util_pct: int | None
    mem_util_pct: int | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    clock_event_mask: int | None
    energy_mj: int | None

    def row(self) -> dict[str, Any]:
        return {
            "kind": "gpu",
            "t_ns": self.t_ns,
            "tick": self.tick,
            "gpu": self.gpu,
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "util_pct": self.util_pct,
            "mem_util_pct": self.mem_util_pct,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "clock_event_reasons": (
                None
                if self.clock_event_mask is None
                else clock_event_reason_names(self.clock_event_mask)
            ),
            "energy_mj": self.energy_mj,
        }


@dataclass(frozen=True, slots=True)
class GpmSample:
    """GPM values of one GPU over [t_ns - window_ns, t_ns]."""

    t_ns: int
    gpu: int
    window_ns: int
    values: GpmValues

    def row(self) -> dict[str, Any]:
        values = self.values
        return {
            "kind": "gpm",
            "t_ns": self.t_ns,
            "gpu": self.gpu,
            "window_ns": self.window_ns,
            "sm_util_pct": values.sm_util_pct,
            "sm_occupancy_pct": values.sm_occupancy_pct,
            "dram_bw_util_pct": values.dram_bw_util_pct,
            "tensor_util_pct": values.tensor_util_pct,
        }


@dataclass(frozen=True, slots=True)
class PcieSample:
    """PCIe throughput of one GPU over the 20 ms before `t_ns`, in NVML's KB/s."""

    t_ns: int
    gpu: int
    tx_kb_s: int | None
    rx_kb_s: int | None

    def row(self) -> dict[str, Any]:
        return {
            "kind": "pcie",
            "t_ns": self.t_ns,
            "gpu": self.gpu,
            "tx_kb_s": self.tx_kb_s,
            "rx_kb_s": self.rx_kb_s,
        }


@dataclass(frozen=True)
class GpuTrace:
    """What the sampler holds: a consistent copy to summarise while it keeps running.

    `unavailable` maps a GPU to {field: NVML's reason} for the fields that failed (field
    names: power, power_limit, utilization, sm_clock, mem_clock, clock_event_reasons,
    energy, pcie, gpm); `reason` says why there are no GPU samples at all.
    """

    gpus: list[GpuInfo] = field(default_factory=list)
    samples: list[GpuSample] = field(default_factory=list)
    gpm: list[GpmSample] = field(default_factory=list)
    pcie: list[PcieSample] = field(default_factory=list)
    unavailable: dict[int, dict[str, str]] = field(default_factory=dict)
    reason: str | None = None


class GpuSampler:
    """Samples `gpus` on background threads from `start` to `stop`; see the module doc."""

    def __init__(
        self,
        reader: GpuReader,
        gpus: Sequence[int],
        *,
        sink: Sink | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        gpm_interval_s: float = DEFAULT_GPM_INTERVAL_S,
        pcie_interval_s: float = DEFAULT_PCIE_INTERVAL_S,
    ) -> None:
        self._reader = reader
        self._gpus = list(gpus)
        self._sink = sink
        self.errors = ErrorLog()
        self._interval_s = interval_s
        self._gpm_every = max(1, round(gpm_interval_s / interval_s))
        self._pcie_interval_s = pcie_interval_s
        self._lock = threading.Lock()
        self._info: list[GpuInfo] = []
        self._samples: list[GpuSample] = []
        self._gpm: list[GpmSample] = []
        self._pcie: list[PcieSample] = []
        self._unavailable: dict[int, dict[str, str]] = {}
        self._gpm_gpus: list[int] = []
        self._gpm_last_ns: dict[int, int] = {}
        self._tick = 0
        self._loops = [
            Periodic("servelab-telemetry-gpu", interval_s, self._sample, self.errors, label="gpu"),
            Periodic(
                "servelab-telemetry-pcie",
                pcie_interval_s,
                self._sample_pcie,
                self.errors,
                label="pcie",
            ),
        ]

    def start(self) -> None:
        """Describe the GPUs (the header row), check GPM once per GPU, start both threads."""
        self._info = [
            GpuInfo(index, self._reader.uuid(index), self._reader.name(index))
            for index in self._gpus
        ]
        anchor_ns, unix_s = wall_anchor()
        self._emit(
            [
                {
                    "kind": "start",
                    "t_ns": anchor_ns,
                    "unix_time": unix_s,
                    "gpus": [
                        {"gpu": info.index, "uuid": info.uuid, "name": info.name}
                        for info in self._info
                    ],
                    "interval_s": self._interval_s,
                    "gpm_interval_s": self._gpm_every * self._interval_s,
                    "pcie_interval_s": self._pcie_interval_s,
                }
            ]
        )
        rows: list[dict[str, Any]] = []
        for index in self._gpus:
            reason = self._reader.gpm_unsupported_reason(index)
            if reason is None:
                self._gpm_gpus.append(index)
            else:
                rows.extend(self._unavailable_rows(index, "gpm", reason))
        self._emit(rows)
        for loop in self._loops:
            loop.start()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """End both threads; False if one is still stuck in an NVML call after `timeout_s`."""
        for loop in self._loops:
            loop.signal_stop()
        return all([loop.join(timeout_s) for loop in self._loops])

    def trace(self) -> GpuTrace:
        with self._lock:
            return GpuTrace(
                gpus=list(self._info),
                samples=list(self._samples),
                gpm=list(self._gpm),
                pcie=list(self._pcie),
                unavailable={gpu: dict(fields) for gpu, fields in self._unavailable.items()},
            )

    def _emit(self, rows: list[dict[str, Any]]) -> None:
        if rows and self._sink is not None:
            self._sink(rows)

    def _unavailable_rows(self, gpu: int, name: str, reason: str) -> list[dict[str, Any]]:
        """Record a field's reason the first time it fails on a GPU; [] if already recorded."""
        with self._lock:
            fields = self._unavailable.setdefault(gpu, {})
            if name in fields:
                return []
            fields[name] = reason
        return [
            {"kind": "unavailable", "t_ns": now_ns(), "gpu": gpu, "field": name, "reason": reason}
        ]

    def _read(self, gpu: int, name: str, call: Callable[[int], Any], rows: list[dict]) -> Any:
        try:
            return call(gpu)
        except NvmlReadError as exc:
            rows.extend(self._unavailable_rows(gpu, name, str(exc) or "NVML error"))
            return None

    def _sample(self) -> None:
        reader, tick = self._reader, self._tick
        self._tick += 1
        rows: list[dict[str, Any]] = []
        samples: list[GpuSample] = []
        for gpu in self._gpus:
            t_ns = now_ns()
            power = self._read(gpu, "power", reader.power_mw, rows)
            limit = self._read(gpu, "power_limit", reader.power_limit_mw, rows)
            util = self._read(gpu, "utilization", reader.utilization_pct, rows)
            sample = GpuSample(
                t_ns=t_ns,
                tick=tick,
                gpu=gpu,
                power_w=None if power is None else power / MILLIWATTS_PER_W,
                power_limit_w=None if limit is None else limit / MILLIWATTS_PER_W,
                util_pct=None if util is None else util[0],
                mem_util_pct=None if util is None else util[1],
                sm_clock_mhz=self._read(gpu, "sm_clock", reader.sm_clock_mhz, rows),
                mem_clock_mhz=self._read(gpu, "mem_clock", reader.mem_clock_mhz, rows),
                clock_event_mask=self._read(
                    gpu, "clock_event_reasons", reader.clock_event_reasons, rows
                ),
                energy_mj=self._read(gpu, "energy", reader.energy_mj, rows),
            )
            samples.append(sample)
            rows.append(sample.row())
        gpm = self._sample_gpm(rows) if tick % self._gpm_every == 0 else []
        with self._lock:
            self._samples.extend(samples)
            self._gpm.extend(gpm)
        self._emit(rows)

    def _sample_gpm(self, rows: list[dict[str, Any]]) -> list[GpmSample]:
        samples: list[GpmSample] = []
        for gpu in list(self._gpm_gpus):
            t_ns = now_ns()
            try:
                values = self._reader.gpm_metrics(gpu)
            except NvmlReadError as exc:  # GPM said it was supported but cannot sample
                self._gpm_gpus.remove(gpu)
                rows.extend(self._unavailable_rows(gpu, "gpm", f"GPM sampling failed: {exc}"))
                continue
            last = self._gpm_last_ns.get(gpu)
            self._gpm_last_ns[gpu] = t_ns
            if values is not None and last is not None:
                sample = GpmSample(t_ns=t_ns, gpu=gpu, window_ns=t_ns - last, values=values)
                samples.append(sample)
                rows.append(sample.row())
        return samples

    def _sample_pcie(self) -> None:
        rows: list[dict[str, Any]] = []
        samples: list[PcieSample] = []
        for gpu in self._gpus:
            throughput = self._read(gpu, "pcie", self._reader.pcie_kb_s, rows)
            sample = PcieSample(
                t_ns=now_ns(),
                gpu=gpu,
                tx_kb_s=None if throughput is None else throughput[0],
                rx_kb_s=None if throughput is None else throughput[1],
            )
            samples.append(sample)
            rows.append(sample.row())
        with self._lock:
            self._pcie.extend(samples)
        self._emit(rows)


_INDEX_DIGITS = 10
"""An --gpus index this long is unknown whatever NVML sees (int() refuses 4,300 digits)."""


def resolve_gpus(spec: str, reader: GpuReader | None = None) -> list[int]:
    """NVML indices for `--gpus`: indices or UUIDs ('GPU-' optional), comma-separated.

    Without a reader, NVML is opened for the lookup and closed again.
    """
    items = [item.strip() for item in spec.split(",")]
    if not all(items):
        raise ConfigError(f"--gpus {spec!r} has an empty entry", hint="e.g. 0,1 or GPU-<uuid>")
    if reader is None:
        opened, reason = open_gpu_reader()
        if opened is None:
            raise ConfigError(f"--gpus needs NVML, which is not available: {reason}")
        try:
            return resolve_gpus(spec, opened)
        finally:
            opened.close()
    count = reader.device_count()
    uuids = {(reader.uuid(index) or "").lower(): index for index in range(count)}
    indices: list[int] = []
    for item in items:
        if item.isdecimal():
            index = int(item) if len(item) < _INDEX_DIGITS else count
            if index >= count:
                raise ConfigError(
                    f"unknown GPU {item!r} in --gpus",
                    hint=f"NVML sees {count} GPU(s): indices 0 to {count - 1}"
                    if count
                    else "NVML sees no GPU",
                )
        else:
            key = item.lower() if item.lower().startswith("gpu-") else f"gpu-{item.lower()}"
            if key not in uuids:
                raise ConfigError(
                    f"unknown GPU {item!r} in --gpus", hint="no GPU has that UUID; nvidia-smi -L"
                )
            index = uuids[key]
        if index in indices:
            raise ConfigError(f"GPU {item!r} is given twice in --gpus {spec!r}")
        indices.append(index)
    return indices


def open_gpu_reader() -> tuple[PynvmlGpuReader | None, str | None]:
    """NVML through pynvml, or None and why it is not available here."""
    source, reason = open_nvml_with_reason()
    if source is None:
        return None, reason
    return PynvmlGpuReader(source), None


class PynvmlGpuReader:
    """`GpuReader` through pynvml; built by `open_gpu_reader`, which initialises NVML."""

    def __init__(self, source: PynvmlSource) -> None:
        import pynvml

        self._nvml = pynvml
        self._source = source  # the probe's view: count, names, UUIDs, and nvmlShutdown
        self._handles: dict[int, Any] = {}
        self._gpm_previous: dict[int, Any] = {}
        self._gpm_spare: dict[int, Any] = {}

    def _call(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except self._nvml.NVMLError as exc:
            raise NvmlReadError(str(exc)) from None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call(self._nvml.nvmlDeviceGetHandleByIndex, index)
        return self._handles[index]

    def _device(self, index: int, call: Callable[..., Any], *args: Any) -> Any:
        return self._call(call, self._handle(index), *args)

    def device_count(self) -> int:
        return self._source.device_count()

    def uuid(self, index: int) -> str | None:
        return self._source.uuid(index)

    def name(self, index: int) -> str | None:
        return self._source.name(index)

    def power_mw(self, index: int) -> int:
        return self._device(index, self._nvml.nvmlDeviceGetPowerUsage)

    def power_limit_mw(self, index: int) -> int:
        return self._device(index, self._nvml.nvmlDeviceGetEnforcedPowerLimit)

    def utilization_pct(self, index: int) -> tuple[int, int]:
        rates = self._device(index, self._nvml.nvmlDeviceGetUtilizationRates)
        return int(rates.gpu), int(rates.memory)

    def sm_clock_mhz(self, index: int) -> int:
        return self._device(index, self._nvml.nvmlDeviceGetClockInfo, self._nvml.NVML_CLOCK_SM)

    def mem_clock_mhz(self, index: int) -> int:
        return self._device(index, self._nvml.nvmlDeviceGetClockInfo, self._nvml.NVML_CLOCK_MEM)

    def clock_event_reasons(self, index: int) -> int:
        # *EventReasons is the current name; older pynvml releases only have *ThrottleReasons.
        call = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        return self._device(index, call or self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons)

    def energy_mj(self, index: int) -> int:
        return self._device(index, self._nvml.nvmlDeviceGetTotalEnergyConsumption)

    def pcie_kb_s(self, index: int) -> tuple[int, int]:
        nvml = self._nvml
        tx = self._device(index, nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._device(index, nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_RX_BYTES)
        return int(tx), int(rx)

    def gpm_unsupported_reason(self, index: int) -> str | None:
        nvml = self._nvml
        if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
            return "this nvidia-ml-py has no GPM functions"
        try:
            support = self._device(index, nvml.nvmlGpmQueryDeviceSupport)
        except NvmlReadError as exc:
            return f"the GPM support query failed: {exc}"
        if not support.isSupportedDevice:
            return "GPM is not supported on this GPU (it needs Hopper or newer)"
        return None

    def gpm_metrics(self, index: int) -> GpmValues | None:
        nvml = self._nvml
        sample = self._gpm_spare.pop(index, None) or self._call(nvml.nvmlGpmSampleAlloc)
        try:
            self._device(index, nvml.nvmlGpmSampleGet, sample)
        except NvmlReadError:
            self._gpm_spare[index] = sample
            raise
        previous = self._gpm_previous.get(index)
        self._gpm_previous[index] = sample
        if previous is None:
            return None
        self._gpm_spare[index] = previous
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1 = previous
        request.sample2 = sample
        for slot, (_, constant) in enumerate(_GPM_METRICS):
            request.metrics[slot].metricId = getattr(nvml, constant)
        self._call(nvml.nvmlGpmMetricsGet, request)
        values = {
            name: (
                float(request.metrics[slot].value)
                if request.metrics[slot].nvmlReturn == nvml.NVML_SUCCESS
                else None
            )
            for slot, (name, _) in enumerate(_GPM_METRICS)
        }
        return GpmValues(**values)

    def close(self) -> None:
        """Free the GPM buffers and shut NVML down (other NVML users here are unaffected)."""
        for sample in [*self._gpm_previous.values(), *self._gpm_spare.values()]:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError:
                continue
        self._gpm_previous.clear()
        self._gpm_spare.clear()
        self._handles.clear()
        self._source.close()
