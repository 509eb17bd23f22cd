"""Exclusive (self) time of the events on one thread: own duration minus direct children's.

Events on one thread nest by time: an event that starts while another is open is its
child. An event that outlives its parent (the trace's rounding, or a malformed writer) is
cut at the parent's end, so that a thread's exclusive times add up to the time it was
inside some event (less what was cut), which is never more than the trace's window.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["Nested", "exclusive_times"]

Floats = npt.NDArray[np.float64]


class Nested(NamedTuple):
    """A thread's events in nesting order (by start, longest first), with exclusive µs."""

    order: npt.NDArray[np.intp]
    """Indices of the input events in that order."""
    starts: Floats
    exclusive: Floats


def exclusive_times(starts: Floats, durations: Floats) -> Nested:
    """Each event's exclusive µs, found by walking the events with a stack of open ones."""
    # Parents before their children: by start, and at one start the longest first.
    order = np.lexsort((-durations, starts))
    ordered_starts = starts[order]
    ordered_ends = ordered_starts + durations[order]
    exclusive = np.empty(len(order), dtype=np.float64)
    begin, end, own = _floats(ordered_starts), _floats(ordered_ends), _floats(exclusive)
    stack: list[int] = []
    stack_ends: list[float] = []
    for i in range(len(order)):
        start = begin[i]
        while stack_ends and stack_ends[-1] <= start:
            stack.pop()
            stack_ends.pop()
        finish = end[i]
        if stack_ends:
            if finish > stack_ends[-1]:
                finish = stack_ends[-1]
            own[stack[-1]] -= finish - start
        own[i] = finish - start
        stack.append(i)
        stack_ends.append(finish)
    return Nested(order, ordered_starts, exclusive)


def _floats(values: Floats) -> memoryview[float]:
    """The array's items as Python floats, one at a time: far faster than numpy scalars."""
    return values.data.cast("B").cast("d")
