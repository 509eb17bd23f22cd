"""The GPU memory check after a stop, on a stand-in for NVML (the real one runs on a GPU)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from servelab.engines.base import EngineSpec
from servelab.engines.gpu import GpuWatch
from servelab.engines.launcher import launch_engine
from tests.engines import stub  # noqa: F401  (registers stub-engine)


class FakeNvml:
    """pynvml's calls the watch makes, over a table of GPU -> {pid: bytes}."""

    class NVMLError(Exception):
        pass

    def __init__(self, processes: dict[int, dict[int, int]]) -> None:
        self.processes = processes

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=size)
            for pid, size in self.processes[handle].items()
        ]


class FakeSource:
    def __init__(self, count: int) -> None:
        self.count = count
        self.closed = False

    def device_count(self) -> int:
        return self.count

    def close(self) -> None:
        self.closed = True


OTHER_NAMESPACE_PID = 4_000_000  # above pid_max: no such process here, as in a container
GIB = 1 << 30


def test_the_engine_processes_are_those_that_appeared_and_they_go_away():
    nvml = FakeNvml({0: {1: 5 * GIB}, 1: {}})  # pid 1 was there before the launch
    watch = GpuWatch(FakeSource(2), nvml)  # type: ignore[arg-type]
    nvml.processes[0][OTHER_NAMESPACE_PID] = 40 * GIB
    nvml.processes[1][OTHER_NAMESPACE_PID + 1] = 40 * GIB
    nvml.processes[1][os.getpid()] = GIB  # ours, but not in the engine's process group
    watch.observe(pgid=OTHER_NAMESPACE_PID)
    nvml.processes = {0: {1: 5 * GIB}, 1: {os.getpid(): GIB}}
    released, detail = watch.released(timeout_s=1)
    assert released is True
    assert detail.startswith("2 process(es) held 80.0 GiB on GPU 0,1; released 0.0 s after")


def test_memory_still_held_after_the_timeout():
    nvml = FakeNvml({0: {}})
    watch = GpuWatch(FakeSource(1), nvml)  # type: ignore[arg-type]
    nvml.processes[0][OTHER_NAMESPACE_PID] = GIB
    watch.observe(pgid=12345)
    released, detail = watch.released(timeout_s=0.3)
    assert released is False
    assert detail.endswith(f"pid {OTHER_NAMESPACE_PID} still listed 0.3 s after the stop")


def test_an_engine_that_never_touched_a_gpu():
    watch = GpuWatch(FakeSource(1), FakeNvml({0: {}}))  # type: ignore[arg-type]
    watch.observe(pgid=12345)
    assert watch.released(timeout_s=0.1) == (True, "the engine held no GPU memory")


def test_no_nvml_here_is_not_an_error():
    watch, why = GpuWatch.open()
    if watch is None:
        assert why
    else:
        watch.close()


def nvml_here() -> bool:
    from servelab.probe.nvml import open_nvml

    source = open_nvml()
    if source is None:
        return False
    count = source.device_count()
    source.close()
    return count > 0


needs_gpu = pytest.mark.skipif(not nvml_here(), reason="no NVIDIA GPU here")


@needs_gpu
def test_a_real_engine_gives_its_gpu_memory_back(tmp_path: Path):
    engine = launch_engine(
        EngineSpec(engine="stub-engine", options={"cuda_mib": 2048}, startup_timeout_s=120),
        log_path=tmp_path / "engine.log",
    )
    engine.stop(grace_s=5)
    print("detail:", engine.gpu_memory_detail)
    assert engine.gpu_memory_released is True
    assert engine.gpu_memory_detail.startswith("1 process(es) held ")


@needs_gpu
def test_a_worker_that_escaped_the_group_is_caught_holding_memory(tmp_path: Path):
    seen: list[str] = []
    engine = launch_engine(
        EngineSpec(engine="stub-engine", options={"escaped_cuda_mib": 1024}, startup_timeout_s=120),
        log_path=tmp_path / "engine.log",
        on_line=seen.append,
    )
    escaped = int(next(line for line in seen if line.startswith("escaped ")).split()[1])
    try:
        engine.stop(grace_s=5, gpu_timeout_s=3)
        print("detail:", engine.gpu_memory_detail)
        assert engine.gpu_memory_released is False
        assert engine.gpu_memory_detail.endswith(f"pid {escaped} still listed 3 s after the stop")
    finally:
        os.kill(escaped, signal.SIGKILL)
