"""The typed data of the report's plots: what a run gives, and what a plot shows.

A `Plot` is pure data (panels, lines, boxes, level bands) so the report can test, tabulate
or render it without matplotlib; `render.py` turns one into SVG or PNG. Lines and boxes
name their run by label and the panel they are drawn in; `Plot.runs` keeps every run's
label in input order, which is what gives a run the same colour in every plot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servelab.bench.results import LevelSummary
from servelab.engines.signatures import LogScan

__all__ = [
    "PLOT_KEYS",
    "Band",
    "Box",
    "Interval",
    "Line",
    "LineRole",
    "Panel",
    "Plot",
    "RunPlotInput",
    "Scale",
    "Series",
]

PLOT_KEYS = (
    "throughput",
    "latency",
    "pareto",
    "cost",
    "prefix_cache",
    "ttft_distribution",
    "itl_distribution",
    "gpu_timeline",
    "engine_timeline",
)
"""Every plot `build_plots` returns, in this order; each key is a file-safe stem."""

Scale = Literal["linear", "log", "log2"]

LineRole = Literal["measured", "secondary", "ceiling", "points", "frontier", "trace", "queue"]
"""What a line is, which decides how it is drawn: `measured` (solid, markers), `secondary`
(dash-dot, markers), `ceiling` (dashed), `points` (markers only, labelled), `frontier`
(solid, joining points), `trace` (a thin time series) and `queue` (a dashed time series)."""


@dataclass(frozen=True, slots=True)
class RunPlotInput:
    """One run's data as read from its directory; see the package docstring."""

    label: str
    """The run's name, shown in legends (compare reports overlay several runs)."""
    levels: Sequence[LevelSummary]
    """summary.json's levels, in sweep order."""
    records: Sequence[dict[str, Any]]
    """Rows of requests.jsonl (`RequestRecord.to_json()`)."""
    telemetry_rows: Sequence[dict[str, Any]]
    """Rows of telemetry.jsonl (`servelab.telemetry.gpu`)."""
    metrics_rows: Sequence[dict[str, Any]]
    """Rows of metrics.jsonl (`servelab.telemetry.scrape`)."""
    gpu_count: int | None = None
    """GPUs serving the run, for tok/s per GPU; None counts as 1."""
    ceiling_total_tok_s: Callable[[int], float | None] | None = None
    """The analytic model's ceiling of total tok/s at a concurrency; None without a model."""
    events: LogScan | None = None
    """engine_events.json: the engine's log events, stamped on the bench clock, and its exit."""

    def __post_init__(self) -> None:
        if self.gpu_count is not None and self.gpu_count < 1:
            raise ValueError(f"gpu_count must be at least 1, not {self.gpu_count}")


@dataclass(frozen=True, slots=True)
class Panel:
    """One set of axes; panels of a plot are stacked and share their x axis."""

    name: str
    x_label: str
    y_label: str
    x_scale: Scale = "linear"
    y_scale: Scale = "linear"
    y_min: float | None = None
    """A fixed bottom of the y axis (0 for percentages), else matplotlib's choice."""
    y_max: float | None = None
    """The y axis reaches at least this (100 for percentages), so a level reads against it."""
    categories: tuple[str, ...] = ()
    """When set, the x axis is categorical: boxes sit at their category's position."""
    y_categories: tuple[str, ...] = ()
    """When set, the y axis is categorical, these rows top to bottom: a point's y is the
    index of its row (the engine timeline's event kinds)."""
    x_integer: bool = False
    """The x axis counts whole things (trial numbers): ticks at integers only."""


@dataclass(frozen=True, slots=True)
class Line:
    """Points of one run joined (or not, by `role`) in one panel, sorted by x."""

    run: str
    name: str
    """What the line shows, with its unit where the panel's label lacks one."""
    panel: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    role: LineRole = "measured"
    point_labels: tuple[str, ...] = ()
    """One label per point (the Pareto plot's concurrencies; "" for none), or none."""


@dataclass(frozen=True, slots=True)
class Box:
    """One level's distribution of one run, in ms: whiskers at p1 and p99, box p25-p75."""

    run: str
    panel: str
    level: int
    category: str
    """The level's position on a categorical axis (its concurrency or rate)."""
    count: int
    """Values behind the percentiles: requests for TTFT, tokens for ITL."""
    p1: float
    p25: float
    p50: float
    p75: float
    p99: float
    mean: float


@dataclass(frozen=True, slots=True)
class Interval:
    """A range around a line of one run in one panel, drawn as a shaded band: at each x,
    from `low` to `high` (the twin's replays at the fit's bootstrap draws)."""

    run: str
    name: str
    panel: str
    x: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]


Series = Line | Box | Interval


@dataclass(frozen=True, slots=True)
class Band:
    """A load level's window, seconds from its run's first measured send."""

    run: str
    level: int
    label: str
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class Plot:
    """One plot of the report; `missing` says in one line why there is nothing to draw."""

    key: str
    title: str
    caption: str
    runs: tuple[str, ...]
    panels: tuple[Panel, ...] = ()
    series: tuple[Series, ...] = ()
    bands: tuple[Band, ...] = ()
    notes: tuple[str, ...] = ()
    """Partial absences (no model ceiling, a run without telemetry), one line each."""
    missing: str | None = None

    def line(self, name: str, run: str | None = None) -> Line:
        """The line called `name` (of `run`, else of the first run that has one)."""
        for series in self.series:
            if isinstance(series, Line) and series.name == name and run in (None, series.run):
                return series
        raise KeyError(f"{self.key} has no line {name!r}" + (f" for {run!r}" if run else ""))

    def lines(self) -> tuple[Line, ...]:
        return tuple(series for series in self.series if isinstance(series, Line))

    def boxes(self) -> tuple[Box, ...]:
        return tuple(series for series in self.series if isinstance(series, Box))

    def intervals(self) -> tuple[Interval, ...]:
        return tuple(series for series in self.series if isinstance(series, Interval))
