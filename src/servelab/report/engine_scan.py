"""`servelab engine scan`'s result as text and as a plot: how the text was read, its
events, and its stats series over time."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servelab.engines.logscan import EngineLogScan, FieldStats, StatsPoint, StatsSeries
from servelab.engines.logstamps import StampStyle
from servelab.engines.signatures import LogEvent
from servelab.report.plots.data import Line, LineRole, Panel, Plot

__all__ = [
    "ENGINE_SCAN_KEY",
    "engine_scan_plot",
    "guess_words",
    "nothing_read",
    "render_engine_scan",
    "times_words",
]

ENGINE_SCAN_KEY = "engine_scan"

_TEXT_CHARS = 160
"""An event's line is cut to this many characters in the table (--json has it whole)."""
_VALUE_CHARS = 48
"""And each of its fields' values (a config file's path) to this many."""

_FIELD_NAMES = {
    "running": "running requests",
    "queued": "queued requests",
    "kv_usage": "KV cache usage (%)",
    "gen_throughput": "generation (tok/s)",
    "prefill_tokens": "prefill tokens",
    "cached_tokens": "cached prompt tokens",
}
_PANELS: tuple[tuple[str, str, tuple[tuple[str, LineRole], ...]], ...] = (
    ("requests", "requests", (("running", "measured"), ("queued", "queue"))),
    ("kv", "KV cache usage (%)", (("kv_usage", "trace"),)),
    ("throughput", "generation (tok/s)", (("gen_throughput", "trace"),)),
    (
        "prefill",
        "prompt tokens per prefill",
        (("prefill_tokens", "trace"), ("cached_tokens", "queue")),
    ),
)
"""The plot's panels: name, y label, and the gauges drawn in it with how."""
_STAMP_WORDS: dict[StampStyle, str] = {
    "iso8601": "ISO 8601 at each line's start",
    "sglang": "SGLang's [YYYY-MM-DD HH:MM:SS]",
    "vllm": "vLLM's LEVEL MM-DD HH:MM:SS, no year",
}


def render_engine_scan(scan: EngineLogScan) -> RenderableType:
    """What was read and how, the events, then the stats series (a recognised scan)."""
    overview = _pairs(scan.source)
    kind = "a /metrics page" if scan.kind == "metrics" else "an engine log"
    overview.add_row("read", f"{kind} of {_count(scan.lines, 'line')}")
    overview.add_row("engine", escape(guess_words(scan)))
    if scan.version:
        overview.add_row("version", escape(scan.version))
    if scan.kind == "log":
        overview.add_row("events", _events_words(scan))
        overview.add_row(
            "stats", _count(len(scan.stats.points), "sample") if scan.stats else "none"
        )
        if scan.stats is not None:
            overview.add_row("times", escape(times_words(scan)))
    parts: list[RenderableType] = [overview]
    if scan.events:
        parts.append(_events(scan.events))
    if scan.stats is not None:
        parts.append(_stats(scan.stats))
    return Group(*parts)


def guess_words(scan: EngineLogScan) -> str:
    """'vllm (guessed: 12 of its lines matched, 0 of sglang's)' and the like."""
    guess = scan.guess
    if guess.how == "metric_names":
        counts = ", ".join(f"{n} {name}:*" for name, n in guess.matches.items())
        return f"{guess.engine or 'none'} (guessed from its metric names: {counts})"
    others = ", ".join(
        f"{n} of {name}'s" for name, n in guess.matches.items() if name != guess.engine
    )
    if guess.engine is None:
        return f"none recognised (lines matched: {others})"
    how = "given" if guess.how == "given" else "guessed"
    mine = guess.matches.get(guess.engine, 0)
    return f"{guess.engine} ({how}: {mine} of its lines matched, {others})"


def times_words(scan: EngineLogScan) -> str:
    """Where the stats series' times come from, in words."""
    stats = scan.stats
    if stats is None or stats.times == "snapshot":
        return "one /metrics page: a single sample, no time"
    if stats.times == "line_order":
        why = "some stats lines carry no timestamp" if scan.stamp_style else "no line is stamped"
        return f"line order ({why})"
    assert scan.stamp_style is not None
    return f"the lines' own timestamps ({_STAMP_WORDS[scan.stamp_style]})"


def nothing_read(scan: EngineLogScan) -> str:
    """The one line for a text nothing of which was recognised."""
    if scan.lines == 0:
        return f"nothing was read from {scan.source}: it is empty"
    engines = scan.engine or " or ".join(scan.guess.matches)
    if scan.kind == "metrics":
        read = f"no {engines} gauge in this /metrics page"
    else:
        besides = " besides its version line" if scan.events else ""
        read = (
            f"no {engines} stats line or known message{besides} among its "
            f"{_count(scan.lines, 'line')}"
        )
    looks = f"; it looks like {scan.looks_like}" if scan.looks_like else ""
    return f"nothing was read from {scan.source}: {read}{looks}"


def engine_scan_plot(scan: EngineLogScan) -> Plot:
    """The stats series over time (or over lines), one panel per kind of gauge."""
    stats = scan.stats
    title = f"Engine stats in {scan.source}"
    if stats is None or len(stats.points) < 2:
        return Plot(
            ENGINE_SCAN_KEY, title, "", (scan.source,), missing="fewer than 2 stats samples"
        )
    stamped = stats.times == "engine_stamps"
    x_label = "time since the log's first stamp (s)" if stamped else "log line"
    xs = [_x(point, stamped=stamped) for point in stats.points]
    panels: list[Panel] = []
    lines: list[Line] = []
    for panel, y_label, series in _PANELS:
        drawn = [
            line
            for name, role in series
            if (line := _line(scan.source, panel, name, role, xs, stats.points)) is not None
        ]
        if drawn:
            y_max = 100.0 if panel == "kv" else None
            panels.append(Panel(panel, x_label, y_label, y_min=0, y_max=y_max))
            lines += drawn
    caption = (
        f"The stats lines of {scan.engine}'s log, placed by {times_words(scan)}: running and "
        "queued requests, KV cache usage and generation throughput as the engine printed them."
    )
    return Plot(ENGINE_SCAN_KEY, title, caption, (scan.source,), tuple(panels), tuple(lines))


def _x(point: StatsPoint, *, stamped: bool) -> float:
    if stamped and point.t_s is not None:
        return point.t_s
    return float(point.line_no or 0)


def _line(
    run: str,
    panel: str,
    name: str,
    role: LineRole,
    xs: list[float],
    points: list[StatsPoint],
) -> Line | None:
    pairs = [
        (x, value * 100 if name == "kv_usage" else value)
        for x, point in zip(xs, points, strict=True)
        if (value := getattr(point, name)) is not None
    ]
    if not pairs:
        return None
    return Line(
        run=run,
        name=_FIELD_NAMES[name],
        panel=panel,
        x=tuple(x for x, _ in pairs),
        y=tuple(y for _, y in pairs),
        role=role,
    )


def _events_words(scan: EngineLogScan) -> str:
    if not scan.events:
        return "none"
    lines = sum(scan.counts.values())
    return f"{_count(len(scan.events), 'distinct message')}, {_count(lines, 'line')} in all"


def _events(events: list[LogEvent]) -> Table:
    """One row per event, and under it its first line, dimmed."""
    table = Table(
        "kind",
        "severity",
        "count",
        "line",
        "fields / first line",
        title="Events",
        title_justify="left",
        title_style="bold",
        box=None,
    )
    for event in events:
        fields = ", ".join(
            f"{key}={_cut(str(value), _VALUE_CHARS)}" for key, value in event.fields.items()
        )
        table.add_row(
            event.kind.value,
            event.severity.value,
            str(event.count),
            str(event.line_no),
            escape(fields) or "-",
        )
        table.add_row("", "", "", "", Text(_cut(event.text, _TEXT_CHARS), style="dim"))
    return table


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _stats(stats: StatsSeries) -> Table:
    points = stats.points
    first, last = points[0], points[-1]
    if stats.times == "engine_stamps":
        span = f"{first.stamp} to {last.stamp}, {(last.t_s or 0) - (first.t_s or 0):,.1f} s"
    elif stats.times == "line_order":
        span = f"lines {first.line_no} to {last.line_no}"
    else:
        span = "one /metrics page"
    table = Table(
        "gauge",
        "samples",
        "min",
        "median",
        "max",
        title=escape(f"Stats series ({_count(len(points), 'sample')}; {span})"),
        title_justify="left",
        title_style="bold",
        box=None,
    )
    for field in stats.fields:
        table.add_row(_FIELD_NAMES[field.field], str(field.samples), *_values(field))
    return table


def _values(field: FieldStats) -> list[str]:
    """min, median, max; KV usage in % to 0.1, the rest to 0.01, without trailing zeros."""
    scale, digits = (100.0, 1) if field.field == "kv_usage" else (1.0, 2)
    return [
        f"{value * scale:,.{digits}f}".rstrip("0").rstrip(".")
        for value in (field.min, field.median, field.max)
    ]


def _pairs(title: str) -> Table:
    table = Table(
        title=escape(title),
        title_justify="left",
        title_style="bold",
        show_header=False,
        box=None,
        pad_edge=False,
    )
    table.add_column(style="bold")
    table.add_column()
    return table


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"
