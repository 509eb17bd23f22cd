"""The sweep's plots, from summary.json's levels: throughput, latency and the Pareto view.

Pure: numbers in, `Plot`s out. Each run is one set of lines, sorted by its load; a level
missing a statistic (no streamed request, no TPOT) leaves a gap rather than a zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S
from servelab.report.plots._load import LoadAxis, load_axis, scale_for, short_label
from servelab.report.plots.data import Line, LineRole, Panel, Plot, RunPlotInput

__all__ = [
    "latency_plot",
    "levels_and_frontier",
    "pareto_frontier",
    "pareto_plot",
    "throughput_plot",
]

# (panel, line name, LevelSummary field, role) of the latency plot.
_LATENCY: tuple[tuple[str, str, str, LineRole], ...] = (
    ("ttft", "TTFT p50", "median_ttft_ms", "measured"),
    ("ttft", "TTFT p99", "p99_ttft_ms", "secondary"),
    ("tpot", "TPOT p50", "median_tpot_ms", "measured"),
    ("tpot", "TPOT p99", "p99_tpot_ms", "secondary"),
)


def throughput_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """Total and output tok/s against the load, with the model's ceiling where there is one."""
    axis = load_axis(level for run in runs for level in run.levels)
    series: list[Line] = []
    notes = _left_out_notes(runs, axis)
    for run in runs:
        points = axis.points(run.levels)
        if not points:
            continue
        xs = tuple(x for x, _ in points)
        panel = "throughput"
        total = [(x, v) for x, s in points if (v := s.total_throughput) is not None]
        if total:
            series.append(
                Line(
                    run.label,
                    "total tok/s",
                    panel,
                    tuple(x for x, _ in total),
                    tuple(v for _, v in total),
                )
            )
        series.append(
            Line(
                run.label,
                "output tok/s",
                panel,
                xs,
                tuple(s.output_throughput for _, s in points),
                role="secondary",
            )
        )
        ceiling, note = _ceiling(run, points, axis)
        if ceiling is not None:
            series.append(ceiling)
        if note is not None:
            notes.append(note)
    caption = (
        f"Total tok/s (solid: input + output tokens over the level's duration) and output "
        f"tok/s (dash-dot) at each {axis.by} of the sweep, x on a log2 scale."
    )
    if any(line.role == "ceiling" for line in series):
        caption += (
            " The dashed line is the analytic model's ceiling of total tok/s at that "
            "concurrency (servelab model): the gap to it is what the deployment leaves unused."
        )
    return Plot(
        key="throughput",
        title=f"Throughput by {axis.by}",
        caption=caption,
        runs=_labels(runs),
        panels=(_throughput_panel(axis.label, series),),
        series=tuple(series),
        notes=tuple(notes),
        missing=None if series else _no_levels(runs, axis),
    )


def _throughput_panel(x_label: str, series: Sequence[Line]) -> Panel:
    """Log y when the values span 30x or more (a far ceiling, a sweep from 1 to 512), so
    neither the measured curve nor its low levels flatten against the axis."""
    scale = scale_for([y for line in series for y in line.y])
    return Panel(
        "throughput",
        x_label,
        "throughput (tok/s)",
        x_scale="log2",
        y_scale=scale,
        y_min=None if scale == "log" else 0,
    )


def latency_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """TTFT and TPOT, median and p99, against the load: two panels sharing the x axis."""
    axis = load_axis(level for run in runs for level in run.levels)
    series: list[Line] = []
    for run in runs:
        points = axis.points(run.levels)
        for panel, name, field, role in _LATENCY:
            xy = [(x, value) for x, s in points if (value := getattr(s, field)) is not None]
            if xy:
                series.append(
                    Line(
                        run.label,
                        name,
                        panel,
                        tuple(x for x, _ in xy),
                        tuple(float(y) for _, y in xy),
                        role=role,
                    )
                )
    panels = tuple(
        Panel(
            name,
            axis.label,
            label,
            x_scale="log2",
            y_scale=scale_for([y for line in series if line.panel == name for y in line.y]),
        )
        for name, label in (("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)"))
        if any(line.panel == name for line in series)
    )
    return Plot(
        key="latency",
        title=f"Latency by {axis.by}",
        caption=(
            "Time to first token (top) and time per output token (bottom) at each "
            f"{axis.by}: the solid line is the median request, the dash-dot line the 99th "
            "percentile; a log y axis where they span 30x or more."
        ),
        runs=_labels(runs),
        panels=panels,
        series=tuple(series),
        notes=tuple(_left_out_notes(runs, axis)),
        missing=None
        if series
        else "no latency statistics: no level has a request completed with streamed text",
    )


def pareto_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """Throughput per GPU against tokens/s per user, the Pareto-optimal levels joined."""
    series: list[Line] = []
    notes: list[str] = []
    for run in runs:
        gpus = run.gpu_count or 1
        if run.gpu_count is None:
            notes.append(f"{run.label}: the GPUs serving it are not known; counted as 1")
        points = sorted(
            (
                (s.total_throughput / gpus, MS_PER_S / s.median_tpot_ms, short_label(s))
                for s in run.levels
                if s.median_tpot_ms is not None
                and s.median_tpot_ms > 0
                and s.total_throughput is not None
            ),
            key=lambda point: (point[0], point[1]),
        )
        if not points:
            continue
        frontier = [points[i] for i in pareto_frontier([(x, y) for x, y, _ in points])]
        series += levels_and_frontier(run.label, "pareto", points, frontier)
    xs = [x for line in series for x in line.x]
    ys = [y for line in series for y in line.y]
    return Plot(
        key="pareto",
        title="Throughput per GPU against interactivity",
        caption=(
            "Each point is a load level, labelled with its concurrency (or request rate): x is "
            "its total tok/s divided by the GPUs serving the run, y the speed one user sees, "
            "1000 / median TPOT in ms (tok/s per user). The line joins the Pareto-optimal "
            "levels, those no other level beats on both; up and to the right is better."
        ),
        runs=_labels(runs),
        panels=(
            Panel(
                "pareto",
                "total throughput per GPU (tok/s/GPU)",
                "interactivity (tok/s per user)",
                x_scale=scale_for(xs),
                y_scale=scale_for(ys),
            ),
        ),
        series=tuple(series),
        notes=tuple(notes),
        missing=None
        if series
        else "no TPOT: no level has a median TPOT (it needs streamed requests of 2+ tokens)",
    )


def levels_and_frontier(
    run: str,
    panel: str,
    points: Sequence[tuple[float, float, str]],
    frontier: Sequence[tuple[float, float, str]],
) -> list[Line]:
    """A run's levels as labelled points (x, y, label) and its Pareto frontier as a line."""
    return [
        Line(
            run,
            "levels",
            panel,
            tuple(x for x, _, _ in points),
            tuple(y for _, y, _ in points),
            role="points",
            point_labels=tuple(label for _, _, label in points),
        ),
        Line(
            run,
            "Pareto frontier",
            panel,
            tuple(x for x, _, _ in frontier),
            tuple(y for _, y, _ in frontier),
            role="frontier",
        ),
    ]


def pareto_frontier(points: Sequence[tuple[float, float]]) -> tuple[int, ...]:
    """Indices of the points no other dominates, by x ascending (both axes: more is better).

    A point is dominated when another is at least as good on both axes and better on one;
    equal points do not dominate each other, so both stay.
    """
    frontier = [
        i
        for i, (x, y) in enumerate(points)
        if not any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy in points)
    ]
    return tuple(sorted(frontier, key=lambda i: (points[i][0], -points[i][1])))


def _ceiling(
    run: RunPlotInput, points: list[tuple[float, LevelSummary]], axis: LoadAxis
) -> tuple[Line | None, str | None]:
    """The model's line at the levels' concurrencies, or why there is none."""
    if run.ceiling_total_tok_s is None:
        return None, f"{run.label}: no model ceiling (the run has no analytic model)"
    if axis.mode != "concurrency":
        return None, f"{run.label}: the model ceiling is drawn against concurrency only"
    model = run.ceiling_total_tok_s
    xy = [(x, value) for x, _ in points if (value := model(int(x))) is not None]
    if not xy:
        return None, f"{run.label}: no model ceiling (the model gave none at these concurrencies)"
    line = Line(
        run.label,
        "model ceiling (total tok/s)",
        "throughput",
        tuple(x for x, _ in xy),
        tuple(float(value) for _, value in xy),
        role="ceiling",
    )
    return line, None


def _left_out_notes(runs: Sequence[RunPlotInput], axis: LoadAxis) -> list[str]:
    return [
        f"{run.label}: {count} open-loop level(s) left out; x is concurrency"
        for run in runs
        if (count := axis.left_out(run.levels))
    ]


def _no_levels(runs: Sequence[RunPlotInput], axis: LoadAxis) -> str:
    if not any(run.levels for run in runs):
        return "no load levels: the run's summary has none"
    return f"no load level on the {axis.by} axis"


def _labels(runs: Sequence[RunPlotInput]) -> tuple[str, ...]:
    return tuple(run.label for run in runs)
