"""Kernel launch latency: what one kernel costs dispatched from Python, and replayed in a graph.

A small model's decode step is hundreds or thousands of small kernels, each far below
the memory-bound time the performance model counts, so the step's floor is the kernel
count times what one kernel costs to start (`servelab.model.kernels`). Two costs: eager,
each op dispatched from Python through torch to the driver (the host's pace, a few µs);
replayed, the same ops captured once as a CUDA graph and launched together (the GPU's
pace between back-to-back kernels). The chain is `kernels` in-place adds on one tiny
tensor: the cheapest kernel there is, so these are lower bounds for a real step's.

On the CPU only the eager chain runs (a CPU op's dispatch), and the result says so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from servelab.core.units import NS_PER_US, US_PER_MS
from servelab.probe.comm._timing import synchronize
from servelab.probe.comm.results import LaunchResult

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_LAUNCH_ELEMENTS",
    "DEFAULT_LAUNCH_KERNELS",
    "DEFAULT_LAUNCH_REPLAYS",
    "NO_GRAPHS_ON_CPU",
    "measure_launch",
]

DEFAULT_LAUNCH_KERNELS = 1_000
"""Ops in the chain: a decode step's order of magnitude (1,436 for h200-ref)."""
DEFAULT_LAUNCH_ELEMENTS = 1_024
"""Floats each op touches: one block's worth, so the kernel itself takes about a microsecond."""
DEFAULT_LAUNCH_REPLAYS = 5
"""Graph replays timed back to back per repeat: the GPU stays busy between them."""
NO_GRAPHS_ON_CPU = "CUDA graphs need a CUDA device: kernel launches measured eager, on the CPU"


def measure_launch(
    device: torch.device,
    *,
    kernels: int = DEFAULT_LAUNCH_KERNELS,
    elements: int = DEFAULT_LAUNCH_ELEMENTS,
    repeats: int = 10,
    replays: int = DEFAULT_LAUNCH_REPLAYS,
) -> LaunchResult:
    """Time a chain of `kernels` tiny ops eager (wall clock) and, on CUDA, replayed as a graph."""
    import torch

    if kernels < 1 or repeats < 1 or replays < 1:
        raise ValueError("kernels, repeats and replays must be at least 1")
    x = torch.zeros(elements, dtype=torch.float32, device=device)

    def chain() -> None:
        for _ in range(kernels):
            x.add_(1.0)

    chain()  # warm-up: the first op pays for lazy initialisation
    eager = _eager_us_per_kernel(device, chain, kernels, repeats)
    runs = kernels * (1 + repeats)
    graph: list[float] = []
    if device.type == "cuda":
        graph = _graph_us_per_kernel(device, chain, kernels, repeats, replays)
        runs += kernels * (2 + repeats * replays)  # side-stream warm-up, upload, timed
    synchronize(device)
    return LaunchResult(
        device=str(device),
        kernels=kernels,
        elements=elements,
        eager_us_per_kernel=statistics.median(eager),
        eager_min_us_per_kernel=min(eager),
        eager_max_us_per_kernel=max(eager),
        graph_us_per_kernel=statistics.median(graph) if graph else None,
        graph_min_us_per_kernel=min(graph) if graph else None,
        graph_max_us_per_kernel=max(graph) if graph else None,
        graph_replays=replays if graph else 0,
        chain_verified=bool(float(x[0].item()) == float(runs)),
    )


def _eager_us_per_kernel(
    device: torch.device, chain: Callable[[], None], kernels: int, repeats: int
) -> list[float]:
    """Wall time of the chain from an idle device until the device is done, per op."""
    times: list[float] = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter_ns()
        chain()
        synchronize(device)
        times.append((time.perf_counter_ns() - start) / NS_PER_US / kernels)
    return times


def _graph_us_per_kernel(
    device: torch.device, chain: Callable[[], None], kernels: int, repeats: int, replays: int
) -> list[float]:
    """Capture the chain once (after a run on a side stream), then time replays with events."""
    import torch

    with torch.cuda.device(device):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chain()  # a warm-up on a side stream, as capture asks
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        graph.replay()  # the first replay uploads the graph
        times: list[float] = []
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * US_PER_MS / (replays * kernels))
    return times
