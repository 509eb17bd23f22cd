"""The cost companion of the Pareto plot: what a million tokens cost against the speed one
user sees, the levels no other beats on both joined. Pure: numbers in, a `Plot` out."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.cost import NO_PRICE
from servelab.core.units import MS_PER_S
from servelab.report.plots._load import scale_for, short_label
from servelab.report.plots.data import Line, Panel, Plot, RunPlotInput
from servelab.report.plots.sweep import levels_and_frontier, pareto_frontier

__all__ = ["cost_plot"]


def cost_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """USD per million total tokens against tok/s per user, the Pareto-optimal levels
    (cheaper and faster for one user) joined."""
    series: list[Line] = []
    for run in runs:
        points = sorted(
            (usd, MS_PER_S / s.median_tpot_ms, short_label(s))
            for s in run.levels
            if s.median_tpot_ms is not None
            and s.median_tpot_ms > 0
            and s.cost is not None
            and (usd := s.cost.usd_per_m_total_tokens) is not None
        )
        if not points:
            continue
        # Less cost is better: the frontier of (-cost, per user), drawn by cost ascending.
        best = pareto_frontier([(-x, y) for x, y, _ in points])
        frontier = sorted((points[i] for i in best), key=lambda p: (p[0], -p[1]))
        series += levels_and_frontier(run.label, "cost", points, frontier)
    xs = [x for line in series for x in line.x]
    ys = [y for line in series for y in line.y]
    return Plot(
        key="cost",
        title="Cost per token against interactivity",
        caption=(
            "Each point is a load level, labelled with its concurrency (or request rate): x is "
            "what a million total tokens cost at the run's price (the hour's price / 3600 / "
            "total tok/s x 1e6), y the speed one user sees, 1000 / median TPOT in ms (tok/s "
            "per user). The line joins the Pareto-optimal levels, those no other level beats "
            "on both; up and to the left is better."
        ),
        runs=tuple(run.label for run in runs),
        panels=(
            Panel(
                "cost",
                "cost (USD per million total tokens)",
                "interactivity (tok/s per user)",
                x_scale=scale_for(xs),
                y_scale=scale_for(ys),
            ),
        ),
        series=tuple(series),
        missing=None if series else _missing(runs),
    )


def _missing(runs: Sequence[RunPlotInput]) -> str:
    priced = any(
        s.cost is not None and s.cost.usd_per_m_total_tokens is not None
        for run in runs
        for s in run.levels
    )
    if not priced:
        return NO_PRICE
    return "no TPOT: no priced level has a median TPOT (it needs streamed requests of 2+ tokens)"
