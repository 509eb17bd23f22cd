"""Whether a stopped engine gave its GPU memory back, as NVML sees it.

NVML lists the compute processes on each GPU. The engine's are those that appear after
it starts (a baseline is taken first) and are in its process group or descend from it
(a worker that left the group with setsid is still the engine's, and the one a stop
by process group would miss). Inside a container NVML reports host PIDs, which do not
exist in the container's /proc; those are kept as the engine's too. After the stop, the
memory is released when none of them is listed any more. Without NVML (no driver, no
GPU) there is nothing to check: n/a.
"""

from __future__ import annotations

import time
from typing import Any

from servelab.core.processes import proc_stat
from servelab.core.units import GIB
from servelab.probe.nvml import PynvmlSource, open_nvml_with_reason

__all__ = ["DEFAULT_GPU_RELEASE_TIMEOUT_S", "GpuRelease", "GpuWatch"]

DEFAULT_GPU_RELEASE_TIMEOUT_S = 15.0
"""The driver frees a dead process's memory within a second or two; allow for a busy one."""

_POLL_S = 0.2
_MAX_DEPTH = 64

GpuRelease = tuple[bool | None, str]
"""(released, detail): None when it could not be checked, the detail says why."""


class GpuWatch:
    """The GPU processes one engine started, from before its launch to after its stop."""

    def __init__(self, source: PynvmlSource, nvml: Any) -> None:
        self._source = source
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(source.device_count())]
        self._baseline = set(self._processes())
        self._engine: dict[int, tuple[int, int]] = {}
        """pid -> (GPU index, bytes) as last seen."""

    @classmethod
    def open(cls) -> tuple[GpuWatch | None, str | None]:
        """A watch with its baseline taken, or None and why not (no NVML, no GPU)."""
        source, why = open_nvml_with_reason()
        if source is None:
            return None, why
        if source.device_count() == 0:
            source.close()
            return None, "NVML sees no GPU"
        import pynvml

        try:
            return cls(source, pynvml), None
        except pynvml.NVMLError as error:
            source.close()
            return None, f"NVML: {error}"

    def observe(self, pgid: int) -> None:
        """Note the engine's GPU processes now (after it is ready, and just before stop)."""
        for pid, seen in self._processes().items():
            if pid not in self._baseline and _belongs(pid, pgid):
                self._engine[pid] = seen

    def released(self, *, timeout_s: float = DEFAULT_GPU_RELEASE_TIMEOUT_S) -> GpuRelease:
        """Wait until no process of the engine is listed; say what was held and for how long."""
        if not self._engine:
            return True, "the engine held no GPU memory"
        held = sum(size for _, size in self._engine.values())
        gpus = ",".join(str(i) for i in sorted({gpu for gpu, _ in self._engine.values()}))
        what = f"{len(self._engine)} process(es) held {held / GIB:.1f} GiB on GPU {gpus}"
        start = time.monotonic()
        while True:
            left = set(self._engine) & set(self._processes())
            waited = time.monotonic() - start
            if not left:
                return True, f"{what}; released {waited:.1f} s after the stop"
            if waited > timeout_s:
                pids = ", ".join(str(pid) for pid in sorted(left))
                return False, f"{what}; pid {pids} still listed {timeout_s:g} s after the stop"
            time.sleep(_POLL_S)

    def close(self) -> None:
        self._source.close()

    def _processes(self) -> dict[int, tuple[int, int]]:
        """Every compute process NVML lists: pid -> (GPU index, bytes used)."""
        found: dict[int, tuple[int, int]] = {}
        for index, handle in enumerate(self._handles):
            try:
                processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self._nvml.NVMLError:
                continue
            for process in processes:
                used = process.usedGpuMemory
                found[int(process.pid)] = (index, int(used) if isinstance(used, int) else 0)
        return found


def _belongs(pid: int, pgid: int) -> bool:
    """In the engine's group or below its leader; also a PID from another namespace."""
    seen = 0
    while pid > 1 and seen < _MAX_DEPTH:
        stat = proc_stat(pid)
        if stat is None:
            return seen == 0  # not in this namespace (a container): NVML's host PID
        if pid == pgid or stat.pgrp == pgid:
            return True
        pid, seen = stat.ppid, seen + 1
    return False
