"""A node's clock against the driver's, from round trips: the best sample and its bound.

`time.perf_counter_ns()` is CLOCK_MONOTONIC, which counts from an arbitrary point of each
host (its boot), so stamps taken on two hosts share no zero. The driver asks a node for
its clock between two readings of its own, t0 and t1: the node read its clock somewhere
in between, so its offset is its reading minus the midpoint, within ±(t1 - t0) / 2
whatever the asymmetry of the two ways. Of several samples the one with the shortest
round trip has the tightest bound (NTP's clock filter does the same).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from servelab.core.clock import now_ns

__all__ = ["SAMPLES", "ClockOffset", "best_offset", "measure_offset"]

SAMPLES = 16
"""Round trips per node before each level: a few milliseconds on a quiet network."""


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """A node's clock minus the driver's, and how far off that may be."""

    offset_ns: int
    error_ns: int
    """Half the best round trip: the true offset lies within offset_ns ± error_ns."""


def best_offset(samples: Iterable[tuple[int, int, int]]) -> ClockOffset:
    """From (t0 driver, node's reading, t1 driver) samples, the shortest round trip's."""
    t0, remote, t1 = min(samples, key=lambda sample: sample[2] - sample[0])
    return ClockOffset(offset_ns=remote - (t0 + t1) // 2, error_ns=(t1 - t0 + 1) // 2)


def measure_offset(read_node: Callable[[], int], *, samples: int = SAMPLES) -> ClockOffset:
    """Ask `read_node` for the node's clock `samples` times; the best round trip's offset."""
    taken = []
    for _ in range(samples):
        t0 = now_ns()
        remote = read_node()
        taken.append((t0, remote, now_ns()))
    return best_offset(taken)
