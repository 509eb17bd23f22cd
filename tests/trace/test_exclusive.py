"""Exclusive time per event on one thread: own duration minus direct children's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.trace.exclusive import exclusive_times


def _exclusive(events):
    starts = np.array([s for s, _ in events], dtype=np.float64)
    durs = np.array([d for _, d in events], dtype=np.float64)
    nested = exclusive_times(starts, durs)
    assert (np.diff(nested.starts) >= 0).all()
    result = np.empty(len(events))
    result[nested.order] = nested.exclusive
    return result.tolist()


def test_nesting_subtracts_direct_children_only():
    # annotation [0, 100) > op [10, 30) > launch [15, 20); op [40, 50); a later root.
    events = [(0.0, 100.0), (10.0, 20.0), (15.0, 5.0), (40.0, 10.0), (200.0, 50.0)]
    assert _exclusive(events) == [70.0, 15.0, 5.0, 10.0, 50.0]


def test_same_start_longest_is_the_parent():
    assert _exclusive([(0.0, 5.0), (0.0, 10.0)]) == [5.0, 5.0]


def test_child_that_outlives_its_parent_is_cut_at_its_end():
    # [0, 10) and [5, 15): the second is the first's child, cut to [5, 10).
    assert _exclusive([(0.0, 10.0), (5.0, 10.0)]) == [5.0, 5.0]


def test_sibling_starting_at_the_end_is_not_a_child():
    assert _exclusive([(0.0, 10.0), (10.0, 10.0), (20.0, 0.0)]) == [10.0, 10.0, 0.0]


_events = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)), min_size=1, max_size=40).map(
    lambda pairs: [(float(s), float(d)) for s, d in pairs]
)


@settings(max_examples=300, deadline=None)
@given(_events)
def test_sums_to_no_more_than_the_covered_time(events):
    exclusive = _exclusive(events)
    covered = np.zeros(400, dtype=bool)
    for start, dur in events:
        covered[int(start) : int(start + dur)] = True
    assert min(exclusive) >= 0
    assert sum(exclusive) <= covered.sum() + 1e-9
    window = max(s + d for s, d in events) - min(s for s, _ in events)
    assert sum(exclusive) <= window + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=12))
def test_properly_nested_sums_to_the_covered_time(widths):
    # Intervals centred on one point nest; each one's exclusive time is its two margins.
    events, half = [], 0.0
    for width in sorted(set(widths)):
        half += width
        events.append((-half, 2 * half))
    exclusive = _exclusive(events)
    assert abs(sum(exclusive) - 2 * half) < 1e-9
