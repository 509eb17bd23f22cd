"""The twin's plot, from twin.json: each level's median TTFT and TPOT as measured and as
replayed, the replay's 90% interval shaded around its line.

Pure: the twin and the summary's levels (for each level's place on the load axis) in, a
`Plot` out. As in the tuning plot, a series' run is what it is (measured or replayed), so
each keeps one colour and one legend entry in both panels.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.results import LevelSummary
from servelab.report.plots._load import load_axis, scale_for
from servelab.report.plots.data import Interval, Line, Panel, Plot, Series
from servelab.twin.result import TwinLevel, TwinResult

__all__ = ["TWIN_KEY", "twin_plot"]

TWIN_KEY = "twin"

_HEADROOM = 1.08
"""A linear panel reaches this factor over its highest value, so no marker sits on the edge."""
_MEASURED = "measured"
_REPLAYED = "replayed"
# (panel, metric of TwinLevel.metrics, what the line is, y label)
_PANELS = (
    ("ttft", "median_ttft_ms", "TTFT p50", "median TTFT (ms)"),
    ("tpot", "median_tpot_ms", "TPOT p50", "median TPOT (ms)"),
)


def twin_plot(twin: TwinResult, levels: Sequence[LevelSummary]) -> Plot:
    """Measured (markers) against replayed (line, interval shaded) at each level's load."""
    axis = load_axis(levels)
    place = {level.level: x for x, level in axis.points(levels)}
    placed = sorted(
        ((place[lv.level], lv) for lv in twin.levels if lv.level in place), key=lambda p: p[0]
    )
    series: list[Series] = []
    panels: list[Panel] = []
    for panel, metric, name, y_label in _PANELS:
        mine = _panel_series(panel, metric, name, placed)
        if not mine:
            continue
        series += mine
        values = [y for s in mine for y in _values(s)]
        scale = scale_for(values)
        panels.append(
            Panel(
                panel,
                axis.label,
                y_label,
                x_scale="log2",
                y_scale=scale,
                y_min=None if scale == "log" else 0,
                y_max=None if scale == "log" else max(values) * _HEADROOM,
            )
        )
    left_out = len(twin.levels) - len(placed)
    notes = (
        (f"{left_out} replayed level(s) left out: not on the {axis.by} axis of summary.json",)
        if left_out
        else ()
    )
    return Plot(
        key=TWIN_KEY,
        title="Replayed against measured",
        caption=(
            f"Median time to first token (top) and time per output token (bottom) at each "
            f"{axis.by}: the markers are the run as measured, the line the twin's replay of "
            "the same requests under the same limits, the shaded band the 90% interval of "
            "replays at the fit's bootstrap draws. A marker on the line is a level the "
            "fitted step cost explains; one far off it is a level something else shaped."
        ),
        runs=(_MEASURED, _REPLAYED),
        panels=tuple(panels),
        series=tuple(series),
        notes=notes,
        missing=None
        if series
        else "no level of twin.json has a measured or replayed median TTFT or TPOT on the "
        "summary's load axis",
    )


def _panel_series(
    panel: str, metric: str, name: str, placed: Sequence[tuple[float, TwinLevel]]
) -> list[Series]:
    pairs = [(x, lv.metrics[metric]) for x, lv in placed if metric in lv.metrics]
    measured = [(x, p.measured) for x, p in pairs if p.measured is not None]
    replayed = [(x, p.replayed) for x, p in pairs if p.replayed is not None]
    spread = [(x, p.low, p.high) for x, p in pairs if p.low is not None and p.high is not None]
    out: list[Series] = []
    if spread:
        out.append(
            Interval(
                _REPLAYED,
                "90% interval",
                panel,
                tuple(x for x, _, _ in spread),
                tuple(low for _, low, _ in spread),
                tuple(high for _, _, high in spread),
            )
        )
    if replayed:
        out.append(
            Line(
                _REPLAYED,
                name,
                panel,
                tuple(x for x, _ in replayed),
                tuple(y for _, y in replayed),
                role="frontier",
            )
        )
    if measured:
        out.append(
            Line(
                _MEASURED,
                name,
                panel,
                tuple(x for x, _ in measured),
                tuple(y for _, y in measured),
                role="points",
            )
        )
    return out


def _values(series: Series) -> tuple[float, ...]:
    if isinstance(series, Line):
        return series.y
    if isinstance(series, Interval):
        return (*series.low, *series.high)
    return ()
