"""Timing of repeated device work, and the one place times become bandwidths.

On CUDA a batch is timed with events on the device's current stream. A spin kernel
holds the stream while Python queues the batch, so the events time the GPU's work back to
back rather than Python's launch rate (which would otherwise set a floor of ~10-20 µs on
a small copy). On the CPU a batch is timed with perf_counter_ns.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from servelab.core.units import NS_PER_US, US_PER_MS
from servelab.probe.comm.results import BandwidthPoint

if TYPE_CHECKING:
    import torch

__all__ = ["bandwidth_point", "gb_s", "synchronize", "time_per_call_us"]

# Spin cycles per queued call: ~50 µs at 2 GHz, longer than Python takes to launch one.
_HOLD_CYCLES_PER_CALL = 100_000


def time_per_call_us(
    device: torch.device,
    fn: Callable[[], object],
    *,
    iterations: int,
    repeats: int,
    warmup: int = 1,
) -> list[float]:
    """Time per call of `fn`, once per repeat: a batch of `iterations` calls divided by its size."""
    import torch

    for _ in range(warmup):
        fn()
    synchronize(device)
    times_us: list[float] = []
    for _ in range(repeats):
        if device.type == "cuda":
            with torch.cuda.device(device):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(_HOLD_CYCLES_PER_CALL * iterations)
                start.record()
                for _ in range(iterations):
                    fn()
                end.record()
                end.synchronize()
                times_us.append(start.elapsed_time(end) * US_PER_MS / iterations)
        else:
            start_ns = time.perf_counter_ns()
            for _ in range(iterations):
                fn()
            times_us.append((time.perf_counter_ns() - start_ns) / NS_PER_US / iterations)
    return times_us


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gb_s(size_bytes: float, time_us: float) -> float:
    """Bytes per microsecond -> GB/s (10^9 bytes per second)."""
    return size_bytes / time_us / 1e3 if time_us > 0 else 0.0


def bandwidth_point(size_bytes: int, times_us: list[float]) -> BandwidthPoint:
    """Median, fastest and slowest repeat of a copy series, and the median's bandwidth."""
    median = statistics.median(times_us)
    return BandwidthPoint(
        size_bytes=size_bytes,
        time_us=median,
        min_time_us=min(times_us),
        max_time_us=max(times_us),
        bandwidth_gb_s=gb_s(size_bytes, median),
    )
