"""Idle gaps between busy intervals, and the host op that ran before each long one.

A device that idles for a millisecond inside a decode step waits for its host; which host
op started last before the gap began says what the host was doing (an `aten::item` that
synchronised, a sampler, the scheduler's Python between steps).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from servelab.trace.results import GapCause, Gaps, LongGap, round_us

__all__ = ["LONGEST_GAPS", "gap_stats", "record_op_before"]

LONGEST_GAPS = 10
"""Long gaps listed one by one; `Gaps.causes` covers all of them."""

Floats = npt.NDArray[np.float64]


def record_op_before(
    starts: Floats,
    keys: npt.NDArray[np.intc],
    before_lut: npt.NDArray[np.bool_],
    gap_starts: Floats,
    best_ts: Floats,
    best_key: npt.NDArray[np.int64],
) -> None:
    """Update, per gap, the latest-starting host op on this thread that began by its start.

    `starts` are the thread's events in start order and `keys` their (name, category)
    keys; `best_ts` and `best_key` hold, per gap, the best op found on earlier threads.
    """
    if len(gap_starts) == 0:
        return
    chosen = before_lut[keys]
    op_starts, op_keys = starts[chosen], keys[chosen]
    if len(op_starts) == 0:
        return
    index = np.searchsorted(op_starts, gap_starts, side="right") - 1
    found = index >= 0
    candidate = np.where(found, op_starts[np.maximum(index, 0)], -np.inf)
    better = found & (candidate > best_ts)
    best_ts[better] = candidate[better]
    best_key[better] = op_keys[index[better]]


def gap_stats(
    gaps: Floats,
    threshold_us: float,
    long_starts: Floats,
    long_durs: Floats,
    before_key: npt.NDArray[np.int64],
    names: list[tuple[str, str]],
) -> Gaps:
    """The gaps' totals, the longest long ones and the host ops before the long ones."""

    def op(key: int) -> str | None:
        return names[key][0] if key >= 0 else None

    longest = np.argsort(-long_durs, kind="stable")[:LONGEST_GAPS]
    causes: dict[str, tuple[int, float]] = {}
    for key, dur in zip(before_key.tolist(), long_durs.tolist(), strict=True):
        name = op(key) or "(no host op before it)"
        count, total = causes.get(name, (0, 0.0))
        causes[name] = (count + 1, total + dur)
    ranked = sorted(causes.items(), key=lambda item: -item[1][1])[:LONGEST_GAPS]
    return Gaps(
        count=len(gaps),
        total_us=round_us(float(gaps.sum())),
        longest_us=round_us(float(gaps.max())) if len(gaps) else 0.0,
        long_threshold_us=threshold_us,
        long_count=len(long_durs),
        long_total_us=round_us(float(long_durs.sum())),
        longest=[
            LongGap(
                start_us=round_us(long_starts[i]),
                dur_us=round_us(long_durs[i]),
                op_before=op(int(before_key[i])),
            )
            for i in longest
        ],
        causes=[GapCause(op=name, count=c, total_us=round_us(t)) for name, (c, t) in ranked],
    )
