"""The prefix cache by level: the hit rate the engine measured beside the workload's ideal.

Pure: summary.json's levels in, a `Plot` out. The ideal is what an unbounded cache of the
engine's block size could hit (bench.prefix); the gap between the two lines is what
diagnose's `prefix_cache` finding explains.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.report.plots._load import load_axis
from servelab.report.plots.data import Line, LineRole, Panel, Plot, RunPlotInput

__all__ = ["prefix_cache_plot"]

_ROLES: tuple[tuple[str, LineRole], ...] = (("measured", "measured"), ("ideal", "ceiling"))


def prefix_cache_plot(runs: Sequence[RunPlotInput]) -> Plot:
    """Measured and ideal hit rate (% of prompt tokens) at each level of each run."""
    axis = load_axis(level for run in runs for level in run.levels)
    series: list[Line] = []
    for run in runs:
        points = [
            (x, level.prefix_cache)
            for x, level in axis.points(run.levels)
            if level.prefix_cache is not None
        ]
        ideal = [(x, 100 * c.ideal_hit_rate) for x, c in points if c.ideal_hit_rate is not None]
        measured = [(x, 100 * c.hit_rate) for x, c in points if c.hit_rate is not None]
        if not any(y for _, y in ideal) and not measured:
            continue
        for name, role in _ROLES:
            xy = measured if name == "measured" else ideal
            if xy:
                series.append(
                    Line(
                        run.label,
                        f"{name} hit rate",
                        "prefix",
                        tuple(x for x, _ in xy),
                        tuple(y for _, y in xy),
                        role=role,
                    )
                )
    return Plot(
        key="prefix_cache",
        title=f"Prefix-cache hit rate by {axis.by}",
        caption=(
            "The share of prompt tokens the engine served from its prefix cache (solid: its "
            "own counters' growth over the level) and the share the workload repeats in whole "
            "blocks of the engine's cache, which an unbounded cache would serve (dashed: the "
            "ideal). A solid line well under the dashed one is a cache that is off, evicted "
            "or spread over replicas: diagnose's prefix_cache finding says which."
        ),
        runs=tuple(run.label for run in runs),
        panels=(
            Panel(
                "prefix",
                axis.label,
                "hit rate (% of prompt tokens)",
                x_scale="log2",
                y_min=0,
                y_max=100,
            ),
        ),
        series=tuple(series),
        missing=None
        if series
        else "no prefix to reuse: the workload repeats no prompt prefix and the engine "
        "reported no prefix-cache counters",
    )
