"""The report's plots: pure data built from a run's files, then drawn by matplotlib.

`build_plots(runs)` gives one `Plot` per key of `PLOT_KEYS` (throughput, latency, pareto,
cost, prefix_cache, ttft_distribution, itl_distribution, gpu_timeline, engine_timeline),
each with every run overlaid in a colour of its own. A plot whose data is absent (no GPU
sampled, no engine /metrics, no streamed request, no price) comes back with `missing`
saying why in one line; its `render_svg` and `render_png` raise ValueError, so a renderer
shows `missing` instead.
`tuning_plot(study)` and `twin_plot(twin, levels)` draw a study's trials and a run's twin.
The data layer imports numpy only; matplotlib loads inside the render functions.
"""

from servelab.report.plots.build import build_plots
from servelab.report.plots.data import (
    PLOT_KEYS,
    Band,
    Box,
    Interval,
    Line,
    LineRole,
    Panel,
    Plot,
    RunPlotInput,
    Scale,
    Series,
)
from servelab.report.plots.distributions import itl_ms, ttft_ms, weighted_percentiles
from servelab.report.plots.render import plot_id, render_png, render_svg
from servelab.report.plots.sweep import pareto_frontier
from servelab.report.plots.timelines import MAX_POINTS, level_windows, run_origin_ns
from servelab.report.plots.tuning import TUNING_KEY, TUNING_PARETO_KEY, tuning_plot
from servelab.report.plots.twin import TWIN_KEY, twin_plot

__all__ = [
    "MAX_POINTS",
    "PLOT_KEYS",
    "TUNING_KEY",
    "TUNING_PARETO_KEY",
    "TWIN_KEY",
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
    "build_plots",
    "itl_ms",
    "level_windows",
    "pareto_frontier",
    "plot_id",
    "render_png",
    "render_svg",
    "run_origin_ns",
    "ttft_ms",
    "tuning_plot",
    "twin_plot",
    "weighted_percentiles",
]
