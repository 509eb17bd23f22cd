"""One call's time in milliseconds, as the GPU or the CPU saw it: shared by decode_step.py
and tp_step.py so both scripts time a step the same way."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def elapsed_ms(run: Callable[[], object], device: torch.device) -> float:
    """CUDA events around the call on a GPU (the device's own clock, without the host's
    launch gap after it), the wall clock on the CPU."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    began = time.perf_counter()
    run()
    return (time.perf_counter() - began) * 1e3
