"""What the GPUs and the engine did over the run, with each load level shaded as a band.

Samples and requests share one clock (`perf_counter_ns`), so a row's `t_ns` and a record's
`t_send_ns` line up; time is plotted in seconds from the run's first measured send. GPU
rows of one 10 Hz tick are combined first (power summed over summed limits, utilization
averaged), then any series is averaged down to at most `MAX_POINTS` points, so an hour of
eight GPUs draws as fast as a minute of one.

The engine timeline also marks the engine's log events (`engine_events.py`) on that axis,
in a panel of one labelled row per event kind: an engine without /metrics (transformers
serve, the embedded engine) is drawn from its events alone, and its caption says its
counts are not available.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from servelab.core.units import NS_PER_S
from servelab.report.plots._load import band_label
from servelab.report.plots.data import Band, Line, LineRole, Panel, Plot, RunPlotInput
from servelab.report.plots.engine_events import event_marks, event_notes, event_rows

__all__ = [
    "MAX_POINTS",
    "engine_timeline_plot",
    "gpu_timeline_plot",
    "level_windows",
    "run_origin_ns",
]

MAX_POINTS = 2000
"""At most this many points per timeline line; beyond, consecutive samples are averaged."""

_X_LABEL = "time since the first measured request (s)"
_PERCENT = 100.0
_EVENTS_LINE = "log events"
_COUNTS = ("running", "queued", "kv_usage")

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class _Trace:
    """One line of one run before it becomes a `Line`."""

    panel: str
    name: str
    t_s: FloatArray
    values: FloatArray
    role: LineRole = "trace"
    labels: tuple[str, ...] = ()


def gpu_timeline_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """Power as % of limit, NVML utilization and GPM SM activity over time, levels shaded."""
    panels = (
        Panel("power", _X_LABEL, "power (% of limit)", y_min=0, y_max=_PERCENT),
        Panel("util", _X_LABEL, "GPU utilization (%)", y_min=0, y_max=_PERCENT),
        Panel("sm", _X_LABEL, "SM activity, GPM (%)", y_min=0, y_max=_PERCENT),
    )
    return _timeline(
        runs,
        key="gpu_timeline",
        title="GPU power and activity over time",
        caption=(
            "GPU power as a share of its enforced limit, NVML utilization (the share of time "
            "any kernel ran) and, on Hopper and newer, GPM SM activity, averaged over the "
            "run's GPUs at each 10 Hz sample; each shaded band is a load level. Utilization "
            "near 100% with power far below the limit means kernels ran but the SMs waited "
            "(communication, small batches)."
        ),
        panels=panels,
        traces_of=lambda run, origin: _gpu_traces(run.telemetry_rows, origin),
        reason_of=lambda run: _gpu_missing(run.telemetry_rows),
    )


def engine_timeline_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """Running and queued requests and KV cache usage from /metrics over time, the engine's
    log events marked, levels shaded; an engine without /metrics is drawn from its events."""
    rows = event_rows(run.events for run in runs)
    panels = (
        Panel("requests", _X_LABEL, "requests", y_min=0),
        Panel("kv", _X_LABEL, "KV cache usage (%)", y_min=0, y_max=_PERCENT),
        Panel("events", _X_LABEL, "log event", y_categories=rows),
    )
    caption = (
        "The requests the engine was running and holding in its queue (waiting), and how "
        "full its KV cache was, from its Prometheus /metrics scraped at 10 Hz; each shaded "
        "band is a load level. A running count that stays flat while the queue grows is "
        "a cap on running requests; KV usage near 100% is a full cache."
    )
    if any(_has_events(run) for run in runs):
        caption += (
            " Each marker is a message of the engine's log at the time servelab read it, on "
            "the row of its kind (cache sizing, CUDA graphs, a full KV cache, an error, the "
            "engine's exit), with how often it repeated or how the engine exited beside it; "
            "messages before the first measured request (start-up: loading, cache sizing, "
            "graph capture, warm-up) are drawn at 0."
        )
    uncounted = [run for run in runs if _has_events(run) and not _has_counts(run.metrics_rows)]
    for run in uncounted:
        who = "this run" if len(runs) == 1 else run.label
        why = _engine_missing(run.metrics_rows).removeprefix("no engine metrics: ")
        caption += (
            f" Running and queued requests and KV cache usage are not available for {who}: "
            f"{why}; only its log events are drawn."
        )
    return _timeline(
        runs,
        key="engine_timeline",
        title="Engine requests and KV cache over time",
        caption=caption,
        panels=panels,
        traces_of=lambda run, origin: [
            *_engine_traces(run.metrics_rows, origin),
            *_event_traces(run, origin, rows),
        ],
        reason_of=lambda run: _engine_missing(run.metrics_rows),
        notes_of=lambda run: event_notes(run.events),
    )


def level_windows(records: Iterable[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Each level's measured span in ns: its first `t_send_ns` to its last `t_end_ns`.

    Warm-up requests are left out, as the summary's duration leaves them out; failed ones
    count, since the load they put on the server is in the samples.
    """
    windows: dict[int, tuple[int, int]] = {}
    for r in records:
        if r.get("warmup"):
            continue
        start, end = windows.get(r["level"], (r["t_send_ns"], r["t_end_ns"]))
        windows[r["level"]] = (min(start, r["t_send_ns"]), max(end, r["t_end_ns"]))
    return dict(sorted(windows.items()))


def run_origin_ns(records: Iterable[dict[str, Any]]) -> int | None:
    """The run's first measured send: time zero of its timelines; None without records."""
    return min((r["t_send_ns"] for r in records if not r.get("warmup")), default=None)


def _timeline(
    runs: Sequence[RunPlotInput],
    *,
    key: str,
    title: str,
    caption: str,
    panels: tuple[Panel, ...],
    traces_of: Callable[[RunPlotInput, int], list[_Trace]],
    reason_of: Callable[[RunPlotInput], str],
    notes_of: Callable[[RunPlotInput], list[str]] = lambda _run: [],
) -> Plot:
    lines: list[Line] = []
    bands: list[Band] = []
    notes: list[str] = []
    reasons: dict[str, str] = {}
    for run in runs:
        sent = run_origin_ns(run.records)
        origin = sent if sent is not None else _first_sample_ns(run)
        traces = [] if origin is None else traces_of(run, origin)
        if origin is None or not traces:
            reasons[run.label] = reason_of(run)
            if len(runs) > 1:
                notes.append(f"{run.label}: {reasons[run.label]}")
            continue
        if sent is None:
            notes.append(f"{run.label}: no measured request; time counts from the first sample")
        notes += [f"{run.label}: {note}" for note in notes_of(run)]
        lines.extend(
            Line(
                run.label,
                trace.name,
                trace.panel,
                tuple(trace.t_s.tolist()),
                tuple(trace.values.tolist()),
                role=trace.role,
                point_labels=trace.labels,
            )
            for trace in traces
        )
        bands.extend(_bands(run, origin))
    used = {line.panel for line in lines}
    return Plot(
        key=key,
        title=title,
        caption=caption,
        runs=tuple(run.label for run in runs),
        panels=tuple(panel for panel in panels if panel.name in used),
        series=tuple(lines),
        bands=tuple(bands),
        notes=tuple(notes),
        missing=None if lines else _one_line(reasons),
    )


def _one_line(reasons: dict[str, str]) -> str:
    """Why no run has data: the reason, or each run's when they differ."""
    if len(set(reasons.values())) == 1:
        return next(iter(reasons.values()))
    return "; ".join(f"{label}: {reason}" for label, reason in reasons.items())


def _bands(run: RunPlotInput, origin_ns: int) -> list[Band]:
    summaries = {summary.level: summary for summary in run.levels}
    return [
        Band(
            run=run.label,
            level=level,
            label=band_label(summaries[level]) if level in summaries else f"level {level}",
            start_s=(start - origin_ns) / NS_PER_S,
            end_s=(end - origin_ns) / NS_PER_S,
        )
        for level, (start, end) in level_windows(run.records).items()
    ]


def _first_sample_ns(run: RunPlotInput) -> int | None:
    """Time zero of a run without measured requests: its first sample or stamped event."""
    kinds = {"gpu", "gpm", "metrics"}
    rows = [*run.telemetry_rows, *run.metrics_rows]
    stamps = [row["t_ns"] for row in rows if row.get("kind") in kinds]
    if run.events is not None:
        stamps += [e.t_mono_ns for e in run.events.events if e.t_mono_ns is not None]
    return min(stamps, default=None)


def _gpu_traces(rows: Sequence[dict[str, Any]], origin_ns: int) -> list[_Trace]:
    """Per tick: summed power over summed limits, mean utilization; GPM per sampling round."""
    gpu = [row for row in rows if row.get("kind") == "gpu"]
    traces: list[_Trace] = []
    if gpu:
        tick = _column(gpu, "tick")
        t_s = (_column(gpu, "t_ns") - origin_ns) / NS_PER_S
        power, limit = _column(gpu, "power_w"), _column(gpu, "power_limit_w")
        _, group = np.unique(tick, return_inverse=True)
        has_power = np.isfinite(power) & np.isfinite(limit) & (limit > 0)
        power_pct = _ratio(group, power, limit, has_power) * _PERCENT
        traces += _traces("power", "power (% of limit)", group, t_s, power_pct)
        util = _column(gpu, "util_pct")
        traces += _traces("util", "GPU utilization (NVML)", group, t_s, util)
    gpm = sorted((row for row in rows if row.get("kind") == "gpm"), key=lambda row: row["t_ns"])
    if gpm:
        t_s = (_column(gpm, "t_ns") - origin_ns) / NS_PER_S
        traces += _traces("sm", "SM activity (GPM)", _rounds(gpm), t_s, _column(gpm, "sm_util_pct"))
    return traces


def _engine_traces(rows: Sequence[dict[str, Any]], origin_ns: int) -> list[_Trace]:
    scrapes = sorted(
        (row for row in rows if row.get("kind") == "metrics"), key=lambda row: row["t_ns"]
    )
    if not scrapes:
        return []
    t_s = (_column(scrapes, "t_ns") - origin_ns) / NS_PER_S
    each = np.arange(len(scrapes))
    kv = _column(scrapes, "kv_usage") * _PERCENT
    return [
        *_traces("requests", "running", each, t_s, _column(scrapes, "running")),
        *_traces("requests", "queued", each, t_s, _column(scrapes, "queued"), role="queue"),
        *_traces("kv", "KV cache usage", each, t_s, kv),
    ]


def _event_traces(run: RunPlotInput, origin_ns: int, rows: tuple[str, ...]) -> list[_Trace]:
    """The run's log events as markers, each on the row of its kind (`rows`' index)."""
    marks = event_marks(run.events, origin_ns, level_windows(run.records))
    if not marks:
        return []
    return [
        _Trace(
            "events",
            _EVENTS_LINE,
            np.array([mark.t_s for mark in marks], dtype=np.float64),
            np.array([rows.index(mark.row) for mark in marks], dtype=np.float64),
            role="points",
            labels=tuple(mark.note for mark in marks),
        )
    ]


def _has_events(run: RunPlotInput) -> bool:
    return run.events is not None and (
        any(e.t_mono_ns is not None for e in run.events.events) or run.events.exit is not None
    )


def _has_counts(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any scrape gave a running or queued count or a KV usage to draw."""
    return any(
        isinstance(row.get(name), int | float) and math.isfinite(row[name])
        for row in rows
        if row.get("kind") == "metrics"
        for name in _COUNTS
    )


def _column(rows: Sequence[dict[str, Any]], name: str) -> FloatArray:
    """A field of every row as floats, NaN where it is None or absent."""
    values = (row.get(name) for row in rows)
    return np.fromiter(
        (np.nan if value is None else value for value in values),
        dtype=np.float64,
        count=len(rows),
    )


def _rounds(gpm: Sequence[dict[str, Any]]) -> npt.NDArray[np.int64]:
    """GPM rows carry no tick: a round ends where a GPU comes back (rows sorted by time)."""
    group, seen = -1, set[int]()
    groups = np.empty(len(gpm), dtype=np.int64)
    for i, row in enumerate(gpm):
        if row["gpu"] in seen or group < 0:
            group, seen = group + 1, set()
        seen.add(row["gpu"])
        groups[i] = group
    return groups


def _ratio(
    group: npt.NDArray[np.intp],
    numerator: FloatArray,
    denominator: FloatArray,
    valid: npt.NDArray[np.bool_],
) -> FloatArray:
    """Per row, its group's sum(numerator) / sum(denominator) over valid rows; NaN if none."""
    size = int(group.max()) + 1
    top = np.bincount(group[valid], numerator[valid], minlength=size)
    bottom = np.bincount(group[valid], denominator[valid], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_group = np.where(bottom > 0, top / bottom, np.nan)
    result: FloatArray = per_group[group]
    return result


def _traces(
    panel: str,
    name: str,
    group: npt.NDArray[np.integer[Any]],
    t_s: FloatArray,
    values: FloatArray,
    role: LineRole = "trace",
) -> list[_Trace]:
    """Rows of a group averaged into one point (time and value), then at most MAX_POINTS."""
    valid = np.isfinite(values)
    if not valid.any():
        return []
    _, dense = np.unique(group[valid], return_inverse=True)
    t, y = _means(dense, t_s[valid], values[valid])
    if len(t) > MAX_POINTS:
        step = -(-len(t) // MAX_POINTS)
        t, y = _means(np.arange(len(t)) // step, t, y)
    return [_Trace(panel, name, t, y, role)]


def _means(
    group: npt.NDArray[np.integer[Any]], t_s: FloatArray, values: FloatArray
) -> tuple[FloatArray, FloatArray]:
    counts = np.bincount(group)
    return np.bincount(group, t_s) / counts, np.bincount(group, values) / counts


def _gpu_missing(rows: Sequence[dict[str, Any]]) -> str:
    kinds = {row.get("kind") for row in rows}
    if "gpu" in kinds or "gpm" in kinds:
        failed = sorted({row["reason"] for row in rows if row.get("kind") == "unavailable"})
        why = f": {failed[0]}" if failed else ""
        return f"no GPU telemetry: NVML gave no power, utilization or GPM value{why}"
    if "start" in kinds:
        return "no GPU telemetry: the sampler started but took no sample"
    return "no GPU telemetry: the run sampled no GPU (NVML)"


def _engine_missing(rows: Sequence[dict[str, Any]]) -> str:
    for row in rows:
        if row.get("kind") == "unavailable":
            return f"no engine metrics: {row.get('reason')}"
    errors = [row.get("message") for row in rows if row.get("kind") == "error"]
    if errors:
        return f"no engine metrics: every /metrics scrape failed ({errors[0]})"
    if any(row.get("kind") == "metrics" for row in rows):
        return "no engine metrics: its /metrics reported no running, queued or KV usage"
    return "no engine metrics: the run scraped no /metrics (transformers serve has none)"
