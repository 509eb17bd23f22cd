"""The union of intervals (busy time) and the gaps between them, against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.trace.intervals import merge_intervals


def _merge(pairs):
    starts = np.array([s for s, _ in pairs], dtype=np.float64)
    ends = np.array([e for _, e in pairs], dtype=np.float64)
    return merge_intervals(starts, ends)


def test_two_streams_overlapping_count_once():
    merged = _merge([(20.0, 60.0), (50.0, 70.0), (75.0, 80.0)])
    assert merged.starts.tolist() == [20.0, 75.0]
    assert merged.ends.tolist() == [70.0, 80.0]
    assert merged.busy_us == 55.0
    assert merged.span_us == 60.0
    assert merged.gaps.tolist() == [5.0]


def test_nested_touching_and_unordered():
    merged = _merge([(30.0, 40.0), (0.0, 100.0), (100.0, 110.0), (10.0, 20.0), (200.0, 200.0)])
    assert list(zip(merged.starts.tolist(), merged.ends.tolist(), strict=True)) == [
        (0.0, 110.0),
        (200.0, 200.0),
    ]
    assert merged.busy_us == 110.0
    assert merged.gaps.tolist() == [90.0]


def test_empty():
    merged = _merge([])
    assert merged.busy_us == 0.0
    assert merged.span_us == 0.0
    assert len(merged.gaps) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 30)).map(lambda p: (p[0], p[0] + p[1])),
        min_size=1,
        max_size=30,
    )
)
def test_matches_brute_force(pairs):
    covered = np.zeros(240, dtype=bool)
    for start, end in pairs:
        covered[start:end] = True
    merged = _merge(pairs)
    assert merged.busy_us == covered.sum()
    first, last = min(s for s, _ in pairs), max(e for _, e in pairs)
    assert merged.span_us == last - first
    assert merged.gaps.sum() == merged.span_us - merged.busy_us
    assert (merged.gaps > 0).all()
