"""`summarize_trace`: one Chrome/Kineto trace file in, a TraceSummary out, read as a stream.

What the summary holds and why each number is defined so is in docs/TRACE.md; busy and
idle follow Holistic Trace Analysis (the union of kernel, memcpy and memset intervals).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from servelab.core.errors import ConfigError
from servelab.trace.collect import BUSY_KINDS, TraceCollector
from servelab.trace.exclusive import exclusive_times
from servelab.trace.gaps import gap_stats, record_op_before
from servelab.trace.intervals import Merged, merge_intervals
from servelab.trace.reader import TraceEvents
from servelab.trace.results import (
    OpStat,
    PerStep,
    StepStats,
    ThreadTotal,
    TraceSummary,
    round_us,
)
from servelab.trace.steps import MARKERS, StepCounter

__all__ = [
    "DEFAULT_LONG_GAP_US",
    "DEFAULT_TOP",
    "summarize_trace",
    "summarize_traces",
    "trace_files",
]

DEFAULT_TOP = 15
"""Kernels or ops listed."""
DEFAULT_LONG_GAP_US = 1000.0
"""An idle gap this long (1 ms) is long: listed, with the host op before it."""
TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")
"""A folder's trace files: torch's *.pt.trace.json(.gz), SGLang's *.trace.json.gz."""

_HOST_OPS = {"cpu_op", "cuda_runtime", "cuda_driver"}
_BEFORE_GAP = {"cpu_op", "user_annotation"}

Floats = npt.NDArray[np.float64]


def summarize_traces(
    path: Path,
    *,
    top: int = DEFAULT_TOP,
    long_gap_us: float = DEFAULT_LONG_GAP_US,
    steps: int | None = None,
    step_marker: str | None = None,
) -> list[TraceSummary]:
    """A FILE's summary, or one per trace file in a DIR (an engine's rank files), by name."""
    return [
        summarize_trace(
            file, top=top, long_gap_us=long_gap_us, steps=steps, step_marker=step_marker
        )
        for file in trace_files(path)
    ]


def trace_files(path: Path) -> list[Path]:
    """`path` itself, or the trace files directly in the folder `path`, sorted by name."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError(f"no trace file or folder at {path}")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        raise ConfigError(
            f"no trace files in {path}", hint="names ending in .trace.json or .trace.json.gz"
        )
    return files


def summarize_trace(
    path: Path,
    *,
    top: int = DEFAULT_TOP,
    long_gap_us: float = DEFAULT_LONG_GAP_US,
    steps: int | None = None,
    step_marker: str | None = None,
) -> TraceSummary:
    """Summarise one trace, holding only compact columns of its events in memory.

    `steps` (the number of steps the trace covers, e.g. a benchmark's profiled
    iterations) turns the window's totals into per-step figures; without it the steps
    found by their markers are used. `step_marker` is a regular expression for a caller's
    own step annotation, preferred to the engines' markers.
    """
    if top < 1 or long_gap_us <= 0 or (steps is not None and steps < 1):
        raise ConfigError("top and steps must be at least 1, and long_gap_us positive")
    counter = StepCounter(step_marker)
    collector = TraceCollector(counter)
    events = TraceEvents(path)
    for event in events:
        collector.add(event)
    if collector.complete == 0:
        raise ConfigError(f"{path} has no complete (ph X) events to summarise")
    return _summarize(path, events, collector, top, long_gap_us, steps, counter.result())


def _summarize(
    path: Path,
    events: TraceEvents,
    collector: TraceCollector,
    top: int,
    long_gap_us: float,
    steps: int | None,
    found: StepStats | None,
) -> TraceSummary:
    window = collector.end_us - collector.start_us
    categories = np.array([category.lower() for _, category in collector.names], dtype=object)
    device = len(collector.device) > 0
    merged = _device_busy(collector) if device else _cpu_busy(collector, categories)
    gaps = merged.gaps
    long = gaps >= long_gap_us
    long_starts = merged.ends[:-1][long]
    long_durs = gaps[long]

    nkeys = len(collector.names)
    host = _host_threads(collector, categories, long_starts, window)

    device_total = np.zeros(nkeys)
    device_count = np.zeros(nkeys, dtype=np.int64)
    if device:
        _, dur, keys = collector.device.arrays()
        device_total = _sums(keys, dur, nkeys)
        device_count = np.bincount(keys, minlength=nkeys)
    is_kernel = categories == "kernel"
    kernels = int(device_count[is_kernel].sum())
    kernel_us = float(device_total[is_kernel].sum())

    def ops(totals: Floats, counts: npt.NDArray[np.int64], wanted: set[str]) -> list[OpStat]:
        chosen = np.flatnonzero(np.isin(categories, list(wanted)) & (counts > 0))
        best = chosen[np.argsort(-totals[chosen], kind="stable")][:top]
        return [
            OpStat(
                name=collector.names[k][0],
                category=collector.names[k][1],
                count=int(counts[k]),
                total_us=round_us(totals[k]),
                mean_us=round_us(totals[k] / counts[k]),
                window_share=_share(float(totals[k]), window),
            )
            for k in best
        ]

    host_ops = ops(host.totals, host.counts, _HOST_OPS if device else {"cpu_op"})
    busy = merged.busy_us
    span = merged.span_us
    step_count = steps if steps is not None else (found.count if found is not None else None)
    return TraceSummary(
        file=str(path),
        events_read=events.read,
        complete_events=collector.complete,
        truncated=events.cut is not None,
        window_us=round_us(window),
        device=device,
        busy_basis="device" if device else "cpu_op",
        busy_us=round_us(busy),
        busy_share=_share(busy, window),
        span_us=round_us(span),
        span_busy_share=_share(busy, span),
        kernels=kernels,
        memcpys=collector.busy_kinds["memcpy"],
        memsets=collector.busy_kinds["memset"],
        kernel_us=round_us(kernel_us),
        mean_kernel_us=round_us(kernel_us / kernels) if kernels else None,
        top_ops=ops(device_total, device_count, set(BUSY_KINDS)) if device else host_ops,
        top_host_ops=host_ops if device else [],
        gaps=gap_stats(
            gaps,
            long_gap_us,
            long_starts - collector.start_us,
            long_durs,
            host.before_key,
            collector.names,
        ),
        threads=host.threads,
        steps=found,
        per_step=None
        if step_count is None
        else PerStep(
            steps=step_count,
            source="given" if steps is not None else "markers",
            window_us=round_us(window / step_count),
            busy_us=round_us(busy / step_count),
            kernels=kernels / step_count,
            kernel_us=round_us(kernel_us / step_count),
            device_events=len(collector.device) / step_count,
        ),
        categories=dict(collector.categories.most_common()),
        notes=_notes(events, collector, device, found, steps),
    )


class _Host(NamedTuple):
    threads: list[ThreadTotal]
    totals: Floats
    """Exclusive µs per (name, category) key, over every host thread."""
    counts: npt.NDArray[np.int64]
    before_key: npt.NDArray[np.int64]
    """Per long gap, the key of the host op that started last before it; -1 if none."""


def _host_threads(
    collector: TraceCollector,
    categories: npt.NDArray[np.object_],
    long_starts: Floats,
    window: float,
) -> _Host:
    """Nest each host thread's events once: its total, each op's, and the ops before gaps."""
    nkeys = len(collector.names)
    totals = np.zeros(nkeys)
    counts = np.zeros(nkeys, dtype=np.int64)
    before_ts = np.full(len(long_starts), -np.inf)
    before_key = np.full(len(long_starts), -1, dtype=np.int64)
    before_lut = np.isin(categories, list(_BEFORE_GAP))
    threads = []
    for (pid, tid), columns in collector.host_threads().items():
        ts, dur, keys = columns.arrays()
        nested = exclusive_times(ts, dur)
        ordered_keys = keys[nested.order]
        totals += _sums(ordered_keys, nested.exclusive, nkeys)
        counts += np.bincount(keys, minlength=nkeys)
        record_op_before(
            nested.starts, ordered_keys, before_lut, long_starts, before_ts, before_key
        )
        total = float(nested.exclusive.sum())
        del nested, ordered_keys
        threads.append(
            ThreadTotal(
                pid=pid,
                tid=tid,
                name=collector.thread_names.get((pid, tid)),
                events=len(columns),
                exclusive_us=round_us(total),
                window_share=_share(total, window),
            )
        )
    threads.sort(key=lambda t: -t.exclusive_us)
    return _Host(threads, totals, counts, before_key)


def _sums(keys: npt.NDArray[np.intc], weights: Floats, nkeys: int) -> Floats:
    """Per key, the sum of its events' weights."""
    return np.asarray(np.bincount(keys, weights=weights, minlength=nkeys), dtype=np.float64)


def _device_busy(collector: TraceCollector) -> Merged:
    ts, dur, _ = collector.device.arrays()
    return merge_intervals(ts, ts + dur)


def _cpu_busy(collector: TraceCollector, categories: npt.NDArray[np.object_]) -> Merged:
    """The union of cpu_op intervals over every host thread."""
    is_op = categories == "cpu_op"
    starts: list[Floats] = []
    ends: list[Floats] = []
    for columns in collector.host_threads().values():
        ts, dur, keys = columns.arrays()
        chosen = is_op[keys]
        starts.append(ts[chosen])
        ends.append(ts[chosen] + dur[chosen])
    if not starts:
        return merge_intervals(np.empty(0), np.empty(0))
    return merge_intervals(np.concatenate(starts), np.concatenate(ends))


def _notes(
    events: TraceEvents,
    collector: TraceCollector,
    device: bool,
    found: StepStats | None,
    steps: int | None,
) -> list[str]:
    notes = []
    if not device:
        notes.append(
            "CPU-only trace: device-busy is not defined; the CPU ops are summarised instead "
            "(busy is the union of cpu_op intervals over all threads, gaps are gaps in it)"
        )
    elif len(collector.device_pids) > 1:
        notes.append(f"device events of {len(collector.device_pids)} devices: busy is their union")
    if events.cut is not None:
        notes.append(
            f"the file ends early ({events.cut}): the {events.read:,} events before the cut "
            "are summarised"
        )
    if found is None:
        names = ", ".join(marker.label for marker in MARKERS)
        notes.append(f"no step markers ({names}): give the number of steps for per-step figures")
    elif steps is not None and steps != found.count:
        notes.append(f"per-step figures use the {steps} steps given; the trace marks {found.count}")
    if collector.skipped:
        notes.append(f"{collector.skipped:,} complete events without a numeric ts or dur skipped")
    if collector.unpaired:
        notes.append(f"{collector.unpaired:,} begin/end (ph B/E) events are not summarised")
    return notes


def _share(part: float, whole: float) -> float:
    return round(part / whole, 6) if whole > 0 else 0.0
