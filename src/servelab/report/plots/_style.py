"""Colours, sizes and matplotlib settings of the report's plots, in one place.

A run's colour is its position in `Plot.runs`, so it is the same in every plot of a
report. The palette is Okabe and Ito's, readable by colour-blind readers; its yellow is
left out (too pale on white).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servelab.report.plots.data import LineRole

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = [
    "BAND_ALPHA",
    "BAND_GREY",
    "CATEGORY_ROW_IN",
    "DPI",
    "INTERVAL_ALPHA",
    "LABEL_CHARS",
    "LEGEND_HEIGHT_IN",
    "LEGEND_ROW_CHARS",
    "PALETTE",
    "RC",
    "WIDTH_IN",
    "color",
    "legend_columns",
    "line_style",
    "panel_height_in",
    "plain",
    "shorten",
]

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
WIDTH_IN = 8.0
"""Figure width: 800 px in the PNG at `DPI`, 768 px for the SVG's 576 pt."""
LEGEND_HEIGHT_IN = 0.8
"""Room for the x label and a legend above the top panel."""
DPI = 100
BAND_GREY = "#808080"
BAND_ALPHA = (0.07, 0.14)
"""Alternating shades, so neighbouring level bands stay apart."""
INTERVAL_ALPHA = 0.22
"""The shade of an interval around a line (the twin's replays' spread)."""

RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 9.0,
    "axes.labelsize": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 4.5,
    "path.simplify": True,
    "text.usetex": False,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
}

_ROLES: dict[LineRole, dict[str, Any]] = {
    "measured": {"linestyle": "-", "marker": "o"},
    "secondary": {"linestyle": "-.", "marker": "s", "markersize": 3.5},
    "ceiling": {"linestyle": "--", "marker": None, "linewidth": 1.4},
    "points": {"linestyle": "none", "marker": "o", "markersize": 6.0},
    "frontier": {"linestyle": "-", "marker": None, "linewidth": 1.2},
    "trace": {"linestyle": "-", "marker": None, "linewidth": 1.0},
    "queue": {"linestyle": "--", "marker": None, "linewidth": 1.0},
}


CATEGORY_ROW_IN = 0.25
"""Height of one row of a categorical y axis: its 9 pt label and a marker, apart."""


def panel_height_in(panels: int, *, rows: int = 0) -> float:
    """Height of each panel: a lone one gets more, stacked ones less, to stay on a screen;
    one with `rows` categories at least enough for each to be read."""
    return max(2.8 if panels == 1 else 2.1, rows * CATEGORY_ROW_IN)


LEGEND_ROW_CHARS = 110
"""About the characters of 8 pt text, handles included, that fit across one legend row."""
LABEL_CHARS = 40
"""A run label longer than this is cut in legends (the report names the run in full)."""


def legend_columns(labels: list[str]) -> int:
    """As many columns as fit the widest label across the figure, at most four."""
    widest = max((len(label) for label in labels), default=1)
    return max(1, min(4, len(labels), LEGEND_ROW_CHARS // (widest + 6)))


def shorten(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


def plain(text: str) -> str:
    """Text from a user or an engine, shown as written: its '$' never starts mathtext.

    (mathtext stays on for matplotlib's own log-axis tick labels.)
    """
    return text.replace("$", r"\$")


def color(runs: tuple[str, ...], run: str) -> str:
    """The run's colour: its position in the plot's runs, wrapping after the palette."""
    return PALETTE[runs.index(run) % len(PALETTE)]


def line_style(role: LineRole) -> dict[str, Any]:
    """Keyword arguments of `Axes.plot` for a line of this role."""
    return dict(_ROLES[role])
