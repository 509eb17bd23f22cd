"""A fake NVML for the telemetry tests: a machine whose GPUs draw constant power.

Each GPU's energy counter grows at exactly its power, so the joules of any span are known;
calls can be made to fail as NVML does ('Not Supported') or to block like the PCIe read.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from servelab.telemetry.gpu import GpmValues, NvmlReadError


class FakeGpuReader:
    """`GpuReader` over `len(power_w)` GPUs; `fail` maps a method name to NVML's reason."""

    def __init__(
        self,
        power_w: tuple[float, ...] = (250.0, 250.0),
        *,
        limit_w: float = 500.0,
        gpm_reason: str | None = None,
        pcie_block_s: float = 0.0,
        fail: dict[str, str] | None = None,
        broken: set[str] | None = None,
    ) -> None:
        self.power_w = power_w
        self.limit_w = limit_w
        self.gpm_reason = gpm_reason
        self.pcie_block_s = pcie_block_s
        self.fail = fail or {}
        self.broken = broken or set()
        self.started_ns = time.perf_counter_ns()
        self.calls: dict[str, list[int]] = defaultdict(list)
        self.closed = False
        self._gpm_sampled: set[int] = set()
        self._lock = threading.Lock()

    def _call(self, name: str, index: int) -> None:
        with self._lock:
            self.calls[name].append(time.perf_counter_ns())
        if name in self.broken:
            raise RuntimeError(f"{name} is broken")
        if name in self.fail:
            raise NvmlReadError(self.fail[name])
        if index >= len(self.power_w):
            raise NvmlReadError("Invalid Argument")

    def device_count(self) -> int:
        return len(self.power_w)

    def uuid(self, index: int) -> str | None:
        return f"GPU-{index:04d}-fake-{'ab'[index % 2] * 4}"

    def name(self, index: int) -> str | None:
        return "Fake H200"

    def power_mw(self, index: int) -> int:
        self._call("power_mw", index)
        return int(self.power_w[index] * 1000)

    def power_limit_mw(self, index: int) -> int:
        self._call("power_limit_mw", index)
        return int(self.limit_w * 1000)

    def utilization_pct(self, index: int) -> tuple[int, int]:
        self._call("utilization_pct", index)
        return 100, 40

    def sm_clock_mhz(self, index: int) -> int:
        self._call("sm_clock_mhz", index)
        return 1980

    def mem_clock_mhz(self, index: int) -> int:
        self._call("mem_clock_mhz", index)
        return 2619

    def clock_event_reasons(self, index: int) -> int:
        self._call("clock_event_reasons", index)
        return 0x4  # SwPowerCap

    def energy_mj(self, index: int) -> int:
        self._call("energy_mj", index)
        elapsed_s = (time.perf_counter_ns() - self.started_ns) / 1e9
        return 1_000_000 + int(self.power_w[index] * elapsed_s * 1000)

    def pcie_kb_s(self, index: int) -> tuple[int, int]:
        self._call("pcie_kb_s", index)
        time.sleep(self.pcie_block_s)
        return 1000 * (index + 1), 2000 * (index + 1)

    def gpm_unsupported_reason(self, index: int) -> str | None:
        return self.gpm_reason

    def gpm_metrics(self, index: int) -> GpmValues | None:
        self._call("gpm_metrics", index)
        if index not in self._gpm_sampled:  # like NVML: values need two samples
            self._gpm_sampled.add(index)
            return None
        return GpmValues(45.0, 30.0, 60.0, 20.0)

    def close(self) -> None:
        self.closed = True
