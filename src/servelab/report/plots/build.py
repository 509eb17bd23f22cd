"""Every plot of the report from one run or several (compare), as pure data."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from servelab.report.plots.cost import cost_plot
from servelab.report.plots.data import Plot, RunPlotInput
from servelab.report.plots.distributions import itl_distribution_plot, ttft_distribution_plot
from servelab.report.plots.prefix import prefix_cache_plot
from servelab.report.plots.sweep import latency_plot, pareto_plot, throughput_plot
from servelab.report.plots.timelines import engine_timeline_plot, gpu_timeline_plot

__all__ = ["build_plots"]

_BUILDERS = (
    throughput_plot,
    latency_plot,
    pareto_plot,
    cost_plot,
    prefix_cache_plot,
    ttft_distribution_plot,
    itl_distribution_plot,
    gpu_timeline_plot,
    engine_timeline_plot,
)


def build_plots(runs: Sequence[RunPlotInput]) -> list[Plot]:
    """One `Plot` per key of `PLOT_KEYS`, in that order, each with every run overlaid.

    A plot whose data no run has is still returned, with `missing` saying why. Runs keep
    their order (it fixes their colours); a label given twice gets ' (2)', ' (3)', ...
    so legends and series tell the runs apart.
    """
    if not runs:
        raise ValueError("build_plots needs at least one run")
    unique = _unique_labels(runs)
    return [builder(unique) for builder in _BUILDERS]


def _unique_labels(runs: Sequence[RunPlotInput]) -> list[RunPlotInput]:
    seen: set[str] = set()
    unique: list[RunPlotInput] = []
    for run in runs:
        label, n = run.label, 1
        while label in seen:
            n += 1
            label = f"{run.label} ({n})"
        seen.add(label)
        unique.append(run if label == run.label else dataclasses.replace(run, label=label))
    return unique
