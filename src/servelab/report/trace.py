"""Rich rendering of a trace summary: busy share, per step, top ops, gaps, threads, notes."""

from __future__ import annotations

from rich.console import Group, JustifyMethod, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servelab.trace.results import OpStat, TraceSummary

__all__ = ["render_trace"]

_NAME_CHARS = 80


def render_trace(summary: TraceSummary) -> RenderableType:
    """One trace file, in reading order: where the time went, then the detail."""
    parts: list[RenderableType] = [_overview(summary)]
    if summary.per_step is not None:
        parts.append(_per_step(summary))
    if summary.steps is not None:
        parts.append(_steps(summary))
    what = "Device kernels and copies" if summary.device else "CPU ops"
    parts.append(_ops(f"{what} by exclusive time", summary.top_ops))
    if summary.top_host_ops:
        parts.append(_ops("Host ops by exclusive time", summary.top_host_ops))
    parts.append(_gaps(summary))
    if summary.threads:
        parts.append(_threads(summary))
    parts += [Text(f"note: {note}", style="dim") for note in summary.notes]
    return Group(*parts)


def _overview(s: TraceSummary) -> Table:
    cut = " (cut short)" if s.truncated else ""
    table = _pairs(f"{s.file}{cut}")
    busy = "device (kernel, memcpy, memset)" if s.busy_basis == "device" else "CPU ops"
    rows = [
        ("events read", f"{s.events_read:,} ({s.complete_events:,} complete)"),
        ("window", _ms(s.window_us)),
        ("busy", f"{_ms(s.busy_us)} of {busy}: {s.busy_share:.3f} of the window"),
        ("busy span", f"{_ms(s.span_us)}: {s.span_busy_share:.3f} busy (HTA's 1 - idle)"),
    ]
    if s.device:
        mean = "-" if s.mean_kernel_us is None else f"{s.mean_kernel_us:,.2f} µs"
        rows += [
            ("kernels", f"{s.kernels:,}, {_ms(s.kernel_us)} in all, {mean} each on average"),
            ("copies", f"{s.memcpys:,} memcpy, {s.memsets:,} memset"),
        ]
    for name, value in rows:
        table.add_row(name, escape(value))
    return table


def _per_step(s: TraceSummary) -> Table:
    step = s.per_step
    assert step is not None
    origin = "given" if step.source == "given" else "marked in the trace"
    plural = "" if step.steps == 1 else "s"
    table = _pairs(f"Per step ({step.steps:,} step{plural}, {origin})")
    table.add_row("window", _ms(step.window_us))
    table.add_row("busy", f"{_ms(step.busy_us)} ({s.busy_share:.3f} of the window)")
    if s.device:
        table.add_row("kernels", f"{step.kernels:,.1f}, {_ms(step.kernel_us)}")
        table.add_row("device events", f"{step.device_events:,.1f}")
    return table


def _steps(s: TraceSummary) -> Table:
    steps = s.steps
    assert steps is not None
    table = _pairs(f"Steps: {steps.marker}")
    table.add_row("count", f"{steps.count:,}, mean {_ms(steps.mean_us)}")
    for kind, count, mean in (
        ("prefill", steps.prefill, steps.prefill_mean_us),
        ("decode", steps.decode, steps.decode_mean_us),
    ):
        table.add_row(kind, f"{count:,}" + ("" if mean is None else f", mean {_ms(mean)}"))
    table.add_row("mixed, other", f"{steps.mixed:,}, {steps.other:,}")
    return table


def _ops(title: str, ops: list[OpStat]) -> Table:
    table = _table(
        title,
        ("name", "left"),
        ("category", "left"),
        ("count", "right"),
        ("total ms", "right"),
        ("mean µs", "right"),
        ("share", "right"),
    )
    for op in ops:
        table.add_row(
            escape(_short(op.name)),
            escape(op.category),
            f"{op.count:,}",
            f"{op.total_us / 1e3:,.3f}",
            f"{op.mean_us:,.2f}",
            f"{op.window_share:.3f}",
        )
    return table


def _gaps(s: TraceSummary) -> RenderableType:
    g = s.gaps
    table = _pairs("Idle gaps inside the busy span")
    table.add_row("gaps", f"{g.count:,}, {_ms(g.total_us)} in all, longest {_ms(g.longest_us)}")
    table.add_row(
        f"long (≥ {_ms(g.long_threshold_us)})", f"{g.long_count:,}, {_ms(g.long_total_us)} in all"
    )
    if not g.longest:
        return table
    longest = _table(
        "Longest gaps and the host op before each",
        ("at ms", "right"),
        ("gap ms", "right"),
        ("host op before", "left"),
    )
    for gap in g.longest:
        longest.add_row(
            f"{gap.start_us / 1e3:,.3f}",
            f"{gap.dur_us / 1e3:,.3f}",
            escape(_short(gap.op_before or "-")),
        )
    causes = _table(
        "Host ops before long gaps", ("host op", "left"), ("gaps", "right"), ("total ms", "right")
    )
    for cause in g.causes:
        causes.add_row(escape(_short(cause.op)), f"{cause.count:,}", f"{cause.total_us / 1e3:,.3f}")
    return Group(table, longest, causes)


def _threads(s: TraceSummary) -> Table:
    table = _table(
        "Host threads: exclusive time (at most the window)",
        ("pid", "right"),
        ("tid", "right"),
        ("name", "left"),
        ("events", "right"),
        ("exclusive ms", "right"),
        ("share", "right"),
    )
    for t in s.threads:
        table.add_row(
            escape(t.pid),
            escape(t.tid),
            escape(t.name or "-"),
            f"{t.events:,}",
            f"{t.exclusive_us / 1e3:,.3f}",
            f"{t.window_share:.3f}",
        )
    return table


def _table(title: str, *columns: tuple[str, JustifyMethod]) -> Table:
    table = Table(title=escape(title), title_justify="left", min_width=len(title))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    return table


def _pairs(title: str) -> Table:
    table = Table(
        title=escape(title),
        title_justify="left",
        title_style="bold",
        min_width=len(title),
        show_header=False,
        box=None,
        pad_edge=False,
    )
    table.add_column(style="bold")
    table.add_column()
    return table


def _ms(us: float) -> str:
    return f"{us / 1e3:,.3f} ms"


def _short(name: str) -> str:
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 1] + "…"
