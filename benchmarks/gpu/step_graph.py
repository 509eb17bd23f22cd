"""A decode step captured in a CUDA graph: shared by decode_step.py and tp_step.py so both
scripts warm up and capture a step the same way."""

from __future__ import annotations

from collections.abc import Callable

import torch


def capture_graph(
    step: Callable[[], torch.Tensor],
    device: torch.device,
    *,
    warmup: int = 2,
    rewind: Callable[[], None] | None = None,
) -> Callable[[], torch.Tensor]:
    """Capture `step` (after at least two warm-up calls on a side stream, as CUDA graphs
    ask) and return its replay; `rewind` resets the KV cache before each call and the
    capture, where a step appends to it."""
    reset = rewind or (lambda: None)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 2)):
            reset()
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    reset()
    with torch.cuda.graph(graph):
        logits = step()

    def replay() -> torch.Tensor:
        graph.replay()
        return logits

    return replay
