"""The sweep table: one row per load level, the numbers an engineer reads first."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from servelab.bench.results import LevelSummary

__all__ = ["SWEEP_COLUMNS", "render_sweep", "sweep_rows"]

SWEEP_COLUMNS = (
    "load",
    "total tok/s",
    "output tok/s",
    "peak out tok/s",
    "TPOT ms",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "errors",
)
_SLO_COLUMNS = ("goodput req/s", "good %")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _load(s: LevelSummary) -> str:
    if s.max_concurrency is not None:
        return str(s.max_concurrency)
    return f"{s.request_rate:g}/s"


def _errors(s: LevelSummary) -> str:
    if not s.failed:
        return "0"
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(s.errors.items()))
    return f"{s.failed} ({kinds})"


def sweep_rows(levels: Sequence[LevelSummary], *, with_slo: bool) -> list[list[str]]:
    """The table's cells as text, shared by the terminal table and report.md."""
    rows = []
    for s in levels:
        load = (
            _load(s)
            + (" *" if s.client.client_bound else "")
            + (" (interrupted)" if s.interrupted else "")
        )
        row = [
            load,
            f"{s.total_throughput:,.1f}",
            f"{s.output_throughput:,.1f}",
            f"{s.max_output_tokens_per_s:,.0f}",
            _ms(s.mean_tpot_ms),
            _ms(s.median_ttft_ms),
            _ms(s.p99_ttft_ms),
            _errors(s),
        ]
        if with_slo:
            row += [
                "-" if s.request_goodput is None else f"{s.request_goodput:,.2f}",
                "-" if s.good_fraction is None else f"{100 * s.good_fraction:.1f}",
            ]
        rows.append(row)
    return rows


def render_sweep(levels: Sequence[LevelSummary], *, title: str | None = None) -> Table:
    """A Rich table of the sweep; '*' marks a level where the client may have been the limit."""
    with_slo = any(s.slo_ms for s in levels)
    mode = levels[0].load_mode if levels else "concurrency"
    table = Table(title=title, caption=_caption(levels), caption_justify="left")
    for i, name in enumerate(SWEEP_COLUMNS + (_SLO_COLUMNS if with_slo else ())):
        if i == 0:
            name = "concurrency" if mode == "concurrency" else "rate"
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in sweep_rows(levels, with_slo=with_slo):
        table.add_row(*row)
    return table


def _caption(levels: Sequence[LevelSummary]) -> str | None:
    if any(s.client.client_bound for s in levels):
        return "* client-bound: the load generator's lag or CPU may have limited this level"
    return None
