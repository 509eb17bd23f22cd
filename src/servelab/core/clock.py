"""The one clock every timestamp is taken on.

`time.perf_counter_ns()` reads CLOCK_MONOTONIC on Linux, so stamps taken in different
processes of one machine are comparable; that is what lets worker processes and the
simulator share a time axis with the parent.
"""

from __future__ import annotations

import time

from servelab.core.units import NS_PER_MS, NS_PER_S

__all__ = ["NS_PER_MS", "NS_PER_S", "now_ns", "wall_anchor"]

now_ns = time.perf_counter_ns


def wall_anchor() -> tuple[int, float]:
    """A pair (perf_counter_ns, Unix time in seconds) read together, to date monotonic stamps."""
    return time.perf_counter_ns(), time.time()
