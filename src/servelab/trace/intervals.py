"""Interval arithmetic on event columns: the union of intervals and the gaps between them.

Busy time is a union, not a sum: two kernels on two streams that overlap for 3 µs keep
the device busy for those 3 µs once. This is Holistic Trace Analysis's definition of
busy and idle time (kernels merged into non-overlapping intervals, idle = span - busy).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["Merged", "merge_intervals"]

Floats = npt.NDArray[np.float64]


class Merged(NamedTuple):
    """Non-overlapping intervals in time order; gaps[i] separates interval i from i + 1."""

    starts: Floats
    ends: Floats

    @property
    def busy_us(self) -> float:
        """Time covered by at least one interval."""
        return float((self.ends - self.starts).sum())

    @property
    def span_us(self) -> float:
        """First start to last end; 0 when empty."""
        return float(self.ends[-1] - self.starts[0]) if len(self.starts) else 0.0

    @property
    def gaps(self) -> Floats:
        """The idle time between consecutive merged intervals (each > 0)."""
        return self.starts[1:] - self.ends[:-1]


def merge_intervals(starts: Floats, ends: Floats) -> Merged:
    """Merge [start, end) intervals that overlap or touch into their union, in time order."""
    if len(starts) == 0:
        empty = np.empty(0, dtype=np.float64)
        return Merged(empty, empty)
    order = np.argsort(starts, kind="stable")
    ordered_starts = starts[order]
    running_end = np.maximum.accumulate(ends[order])
    del order
    # A new merged interval begins where a start lies beyond every end before it.
    begins = np.empty(len(ordered_starts), dtype=bool)
    begins[0] = True
    np.greater(ordered_starts[1:], running_end[:-1], out=begins[1:])
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, len(ordered_starts) - 1)
    return Merged(ordered_starts[first], running_end[last])
