"""The spread of TTFT and ITL within each level, from requests.jsonl, with numpy.

The medians a summary gives hide the tail a user meets; these plots show it per level as
box plots. The definitions are docs/METRICS.md's, over completed measured requests:
TTFT is the first text chunk's offset; ITL counts the gap before a chunk of k tokens k
times as gap/k (a chunk of 0 tokens passes its gap on to the next), so a k-token chunk
weighs as k values. Percentiles are numpy's linear interpolation on that expanded list,
computed from (value, weight) pairs so a huge token count never becomes that many floats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from servelab.core.units import NS_PER_MS
from servelab.report.plots._load import load_axis, scale_for, short_label
from servelab.report.plots.data import Box, Panel, Plot, RunPlotInput

__all__ = [
    "itl_distribution_plot",
    "itl_ms",
    "ttft_distribution_plot",
    "ttft_ms",
    "weighted_percentiles",
]

_PERCENTILES = (1.0, 25.0, 50.0, 75.0, 99.0)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Weighted = tuple[IntArray, FloatArray, IntArray]
"""(level, value, weight) arrays, one entry per value."""


def ttft_distribution_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """One box per level and run: TTFT of every completed, measured, streamed request."""
    boxes = _boxes(runs, "ttft", lambda run: _with_unit_weights(ttft_ms(run.records)))
    return _plot(
        runs,
        boxes,
        key="ttft_distribution",
        title="Time to first token per level",
        y_label="TTFT (ms)",
        caption=(
            "The time to first token of each completed request, per load level: the box "
            "spans the middle half (p25 to p75) with the median across it, the whiskers "
            "reach p1 and p99; a log y axis where they span 30x or more."
        ),
        missing="no TTFT: no completed request streamed text (requests.jsonl has none)",
    )


def itl_distribution_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """One box per level and run: inter-token latency per token (docs/METRICS.md)."""
    boxes = _boxes(runs, "itl", lambda run: itl_ms(run.records))
    return _plot(
        runs,
        boxes,
        key="itl_distribution",
        title="Inter-token latency per level",
        y_label="ITL per token (ms)",
        caption=(
            "The gaps between streamed chunks, per token, per load level: a gap before a "
            "chunk of k tokens counts k times as gap/k, so chunking never flatters a server. "
            "The box spans p25 to p75 with the median across it, the whiskers reach p1 and "
            "p99; a log y axis where they span 30x or more."
        ),
        missing="no ITL: no completed request streamed two or more text chunks",
    )


def ttft_ms(records: Iterable[dict[str, Any]]) -> tuple[IntArray, FloatArray]:
    """(level, TTFT in ms) of each completed measured request that streamed text."""
    pairs = [
        (r["level"], r["chunk_offsets_ns"][0])
        for r in records
        if _measured(r) and r.get("chunk_offsets_ns")
    ]
    levels = np.fromiter((level for level, _ in pairs), dtype=np.int64, count=len(pairs))
    offsets = np.fromiter((offset for _, offset in pairs), dtype=np.float64, count=len(pairs))
    return levels, offsets / NS_PER_MS


def itl_ms(records: Iterable[dict[str, Any]]) -> Weighted:
    """(level, ITL per token in ms, tokens it counts for), one triple per gap.

    All records at once: the chunks are laid end to end, a chunk that carries tokens (or
    opens its record) is an anchor, and each gap runs from one anchor to the next within
    a record, divided by the later anchor's tokens.
    """
    chosen = [r for r in records if _measured(r) and len(r.get("chunk_offsets_ns") or ()) > 1]
    lengths = np.fromiter(
        (len(r["chunk_offsets_ns"]) for r in chosen), dtype=np.int64, count=len(chosen)
    )
    total = int(lengths.sum())
    offsets = np.fromiter(
        chain.from_iterable(r["chunk_offsets_ns"] for r in chosen), dtype=np.int64, count=total
    )
    tokens = np.fromiter(
        chain.from_iterable(_chunk_tokens(r) for r in chosen), dtype=np.int64, count=total
    )
    record = np.repeat(np.arange(len(chosen)), lengths)
    anchor = tokens > 0
    anchor[np.cumsum(lengths) - lengths] = True
    at, owner, weight = offsets[anchor], record[anchor], tokens[anchor]
    same = owner[1:] == owner[:-1]
    gaps = np.diff(at)[same]
    weights = weight[1:][same]
    level_of = np.fromiter((r["level"] for r in chosen), dtype=np.int64, count=len(chosen))
    return level_of[owner[1:][same]], gaps / weights / NS_PER_MS, weights


def weighted_percentiles(
    values: FloatArray, weights: IntArray, percentiles: Sequence[float]
) -> FloatArray:
    """numpy's linear-interpolation percentiles of `values`, each repeated `weights` times."""
    order = np.argsort(values, kind="stable")
    ordered, ends = values[order], np.cumsum(weights[order])
    total = ends[-1]
    position = np.asarray(percentiles, dtype=np.float64) / 100 * (total - 1)
    below = np.floor(position)
    lo = ordered[np.searchsorted(ends, below, side="right")]
    hi = ordered[np.searchsorted(ends, np.minimum(below + 1, total - 1), side="right")]
    result: FloatArray = lo + (position - below) * (hi - lo)
    return result


def _measured(record: dict[str, Any]) -> bool:
    return bool(record.get("ok")) and not record.get("warmup")


def _chunk_tokens(record: dict[str, Any]) -> Iterable[int]:
    """The tokens of each chunk; one each when the record does not say (or says wrongly)."""
    offsets, tokens = record["chunk_offsets_ns"], record.get("chunk_tokens")
    if tokens is None or len(tokens) != len(offsets):
        return repeat(1, len(offsets))
    return tokens


def _with_unit_weights(pairs: tuple[IntArray, FloatArray]) -> Weighted:
    levels, values = pairs
    return levels, values, np.ones(len(values), dtype=np.int64)


def _boxes(
    runs: Sequence[RunPlotInput], panel: str, values_of: Callable[[RunPlotInput], Weighted]
) -> list[Box]:
    """A box per (run, level on the load axis) that has values, in sweep order by x."""
    axis = load_axis(level for run in runs for level in run.levels)
    boxes: list[Box] = []
    for run in runs:
        levels, values, weights = values_of(run)
        present = set(levels.tolist())
        for _, summary in axis.points(s for s in run.levels if s.level in present):
            mask = levels == summary.level
            v, w = values[mask], weights[mask]
            p1, p25, p50, p75, p99 = weighted_percentiles(v, w, _PERCENTILES)
            boxes.append(
                Box(
                    run=run.label,
                    panel=panel,
                    level=summary.level,
                    category=short_label(summary),
                    count=int(w.sum()),
                    p1=float(p1),
                    p25=float(p25),
                    p50=float(p50),
                    p75=float(p75),
                    p99=float(p99),
                    mean=float(np.dot(v, w) / w.sum()),
                )
            )
    return boxes


def _plot(
    runs: Sequence[RunPlotInput],
    boxes: list[Box],
    *,
    key: str,
    title: str,
    y_label: str,
    caption: str,
    missing: str,
) -> Plot:
    axis = load_axis(level for run in runs for level in run.levels)
    positions = {
        short_label(s): x for run in runs for s in run.levels if (x := axis.x(s)) is not None
    }
    categories = tuple(
        sorted({box.category for box in boxes}, key=lambda category: positions[category])
    )
    panel = Panel(
        boxes[0].panel if boxes else key,
        axis.label,
        y_label,
        y_scale=scale_for([value for box in boxes for value in (box.p1, box.p99)]),
        categories=categories,
    )
    return Plot(
        key=key,
        title=title,
        caption=caption,
        runs=tuple(run.label for run in runs),
        panels=(panel,),
        series=tuple(boxes),
        notes=tuple(
            f"{run.label}: {missing}"
            for run in runs
            if boxes and not any(box.run == run.label for box in boxes)
        ),
        missing=None if boxes else missing,
    )
