"""A `Plot` drawn with matplotlib: SVG to inline in the HTML report, PNG for Markdown.

matplotlib is imported inside these functions only, so importing servelab stays light.
No pyplot and no global state: a `Figure` with its own canvas (Agg for PNG), settings
through `rc_context`. The output is deterministic for the same plot: the SVG hash salt
and every id are derived from the plot's data, and neither format carries a date.
The figure has no title; the report sets it above the image.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from servelab.report.plots import _style
from servelab.report.plots._svg import ROOT_ID, inline_svg
from servelab.report.plots.data import Box, Interval, Line, Panel, Plot

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_id", "render_png", "render_svg"]

_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_PNG_METADATA = {"Software": None}
_BAND_LABEL_ROOM = 0.12
"""Headroom added to the top panel of a timeline for its level labels, share of its span."""
_MAX_LOG_TICKS = 16
"""A log2 axis gets a tick at each level's load when there are at most this many."""


def render_svg(plot: Plot) -> str:
    """The plot as one `<svg>` element, ids prefixed by `plot_id(plot)`.

    Glyphs are paths (no font needed), nothing is fetched from outside the element and
    text (run labels) is escaped by matplotlib. Raises ValueError for a missing plot.
    """
    prefix = plot_id(plot)
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    with _settings(prefix):
        figure = _figure(plot)
        FigureCanvasSVG(figure)
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata=_SVG_METADATA)
    return inline_svg(buffer.getvalue(), prefix)


def render_png(plot: Plot) -> bytes:
    """The plot as PNG bytes, 800 px wide. Raises ValueError for a missing plot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with _settings(plot_id(plot)):
        figure = _figure(plot)
        FigureCanvasAgg(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=_style.DPI, metadata=_PNG_METADATA)
    return buffer.getvalue()


def plot_id(plot: Plot) -> str:
    """A file- and id-safe name unique to the plot's data: its key and a digest of it."""
    digest = hashlib.sha256(repr(plot).encode("utf-8")).hexdigest()[:10]
    return f"{plot.key}-{digest}"


@contextmanager
def _settings(salt: str) -> Iterator[None]:
    import matplotlib as mpl

    with mpl.rc_context({**_style.RC, "svg.hashsalt": salt, "svg.id": ROOT_ID}):
        yield


def _figure(plot: Plot) -> Figure:
    if plot.missing is not None:
        raise ValueError(f"the {plot.key} plot has no data to draw: {plot.missing}")
    if not plot.panels:
        raise ValueError(f"the {plot.key} plot has no panel")
    from matplotlib.figure import Figure

    count = len(plot.panels)
    heights = [_style.panel_height_in(count, rows=len(p.y_categories)) for p in plot.panels]
    height = sum(heights) + _style.LEGEND_HEIGHT_IN
    figure = Figure(figsize=(_style.WIDTH_IN, height), layout="constrained")
    grid = figure.subplots(count, 1, sharex=True, squeeze=False, height_ratios=heights)
    for i, (axes, panel) in enumerate(zip(grid[:, 0], plot.panels, strict=True)):
        _draw_panel(axes, plot, panel, top=i == 0, bottom=i == count - 1)
    return figure


def _draw_panel(axes: Axes, plot: Plot, panel: Panel, *, top: bool, bottom: bool) -> None:
    _draw_bands(axes, plot, labelled=top)
    lines = [s for s in plot.series if isinstance(s, Line) and s.panel == panel.name]
    boxes = [s for s in plot.series if isinstance(s, Box) and s.panel == panel.name]
    for interval in plot.series:
        if isinstance(interval, Interval) and interval.panel == panel.name:
            _draw_interval(axes, plot, interval)
    for line in lines:
        _draw_line(axes, plot, line, beside=bool(panel.y_categories))
    if boxes:
        _draw_boxes(axes, plot, panel, boxes)
    _scale(axes, panel, lines)
    if top and plot.bands and panel.y_scale == "linear":
        low, high = axes.get_ylim()
        axes.set_ylim(low, high + (high - low) * _BAND_LABEL_ROOM)  # the labels sit above data
    axes.set_ylabel(panel.y_label)
    if bottom:
        axes.set_xlabel(panel.x_label)
    handles, labels = axes.get_legend_handles_labels()
    if len(handles) > 1:
        _legend(axes, handles, labels)


def _legend(axes: Axes, handles: Sequence[Artist], labels: list[str]) -> None:
    """Above the panel, so it never hides a point; as many columns as fit."""
    axes.legend(
        handles,
        labels,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.01),
        ncol=_style.legend_columns(labels),
        borderaxespad=0.0,
    )


def _legend_label(plot: Plot, run: str, name: str) -> str:
    return _style.plain(name if len(plot.runs) == 1 else f"{_style.shorten(run)}: {name}")


def _draw_line(axes: Axes, plot: Plot, line: Line, *, beside: bool) -> None:
    """The line, each point's label above and right of it, or `beside` it on its row."""
    color = _style.color(plot.runs, line.run)
    axes.plot(
        line.x,
        line.y,
        color=color,
        label=_legend_label(plot, line.run, line.name),
        **_style.line_style(line.role),
    )
    offset, align = ((6, 0), "center") if beside else ((4, 4), "baseline")
    for x, y, text in zip(line.x, line.y, line.point_labels, strict=False):
        if text:
            axes.annotate(
                _style.plain(text),
                (x, y),
                xytext=offset,
                textcoords="offset points",
                va=align,
                fontsize=7,
                color=color,
            )


def _draw_interval(axes: Axes, plot: Plot, interval: Interval) -> None:
    """The range shaded in the run's colour, under its line."""
    axes.fill_between(
        interval.x,
        interval.low,
        interval.high,
        color=_style.color(plot.runs, interval.run),
        alpha=_style.INTERVAL_ALPHA,
        linewidth=0,
        label=_legend_label(plot, interval.run, interval.name),
    )


def _draw_bands(axes: Axes, plot: Plot, *, labelled: bool) -> None:
    """Level windows shaded in turn; grey for one run, the run's colour when overlaid."""
    overlaid = len({band.run for band in plot.bands}) > 1
    for i, band in enumerate(plot.bands):
        color = _style.color(plot.runs, band.run) if overlaid else _style.BAND_GREY
        axes.axvspan(
            band.start_s,
            band.end_s,
            color=color,
            alpha=_style.BAND_ALPHA[i % 2],
            linewidth=0,
            zorder=0,
        )
        if labelled:
            axes.text(
                (band.start_s + band.end_s) / 2,
                0.98,
                band.label,
                transform=axes.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=7,
                color=color if overlaid else "#404040",
                clip_on=True,
            )


def _draw_boxes(axes: Axes, plot: Plot, panel: Panel, boxes: list[Box]) -> None:
    """Boxes of each category side by side, one per run, at p1/p25/p50/p75/p99."""
    from matplotlib.patches import Patch

    runs = [run for run in plot.runs if any(box.run == run for box in boxes)]
    width = 0.8 / len(runs)
    handles: list[Artist] = []
    for r, run in enumerate(runs):
        color = _style.color(plot.runs, run)
        mine = [box for box in boxes if box.run == run]
        offset = (r - (len(runs) - 1) / 2) * width
        axes.bxp(
            [_stats(box) for box in mine],
            positions=[panel.categories.index(box.category) + offset for box in mine],
            widths=width * 0.85,
            showfliers=False,
            patch_artist=True,
            manage_ticks=False,
            boxprops={"facecolor": color, "edgecolor": color, "alpha": 0.35},
            medianprops={"color": color, "linewidth": 1.8},
            whiskerprops={"color": color},
            capprops={"color": color},
        )
        handles.append(Patch(facecolor=color, edgecolor=color, alpha=0.35))
    axes.set_xticks(range(len(panel.categories)), panel.categories)
    axes.set_xlim(-0.6, len(panel.categories) - 0.4)
    if len(runs) > 1:
        _legend(axes, handles, [_style.plain(_style.shorten(run)) for run in runs])


def _stats(box: Box) -> dict[str, Any]:
    return {
        "whislo": box.p1,
        "q1": box.p25,
        "med": box.p50,
        "q3": box.p75,
        "whishi": box.p99,
        "mean": box.mean,
        "fliers": [],
        "label": box.category,
    }


def _scale(axes: Axes, panel: Panel, lines: list[Line]) -> None:
    from matplotlib.ticker import MaxNLocator, NullLocator

    if panel.x_integer:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))

    if panel.x_scale == "log2":
        axes.set_xscale("log", base=2)
        ticks = sorted({x for line in lines for x in line.x})
        if 0 < len(ticks) <= _MAX_LOG_TICKS:
            axes.set_xticks(ticks, [f"{x:g}" for x in ticks])
            axes.xaxis.set_minor_locator(NullLocator())
    elif panel.x_scale == "log":
        axes.set_xscale("log")
    if panel.y_categories:
        rows = len(panel.y_categories)
        axes.set_yticks(range(rows), [_style.plain(row) for row in panel.y_categories])
        axes.set_ylim(rows - 0.5, -0.5)  # the first row on top
    elif panel.y_scale == "linear":
        if panel.y_min is not None:
            axes.set_ylim(bottom=panel.y_min)
        if panel.y_max is not None:
            axes.set_ylim(top=max(axes.get_ylim()[1], panel.y_max))
    else:
        axes.set_yscale("log", base=2 if panel.y_scale == "log2" else 10)
