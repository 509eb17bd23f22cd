"""The sweep table: one row per load level, the numbers an engineer reads first.

A value the level does not have (a run imported from a peer's file that lacks it) reads
"-", never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from servelab.bench.results import LevelSummary
from servelab.report.cost import usd_text
from servelab.telemetry.summary import LevelTelemetry

__all__ = ["SWEEP_COLUMNS", "render_sweep", "sweep_header", "sweep_rows"]

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
_COST_COLUMN = "$/M total tok"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _rate(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _load(s: LevelSummary) -> str:
    if s.max_concurrency is not None:
        return str(s.max_concurrency)
    return "-" if s.request_rate is None else f"{s.request_rate:g}/s"


def _errors(s: LevelSummary) -> str:
    if s.failed is None:
        return "-"
    if not s.failed:
        return "0"
    if not s.errors:
        return str(s.failed)
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(s.errors.items()))
    return f"{s.failed} ({kinds})"


def _client_bound(s: LevelSummary) -> bool:
    return s.client is not None and s.client.client_bound


_TELEMETRY_COLUMNS = (
    "power % limit",
    "GPU util %",
    "SM util %",
    "tok/J",
    "running",
    "queued",
    "KV %",
)


def sweep_header(levels: Sequence[LevelSummary]) -> list[str]:
    """The table's column names: SLO, cost and telemetry columns only where a level has them."""
    mode = levels[0].load_mode if levels else "concurrency"
    header = ["concurrency" if mode == "concurrency" else "rate", *SWEEP_COLUMNS[1:]]
    if _with_slo(levels):
        header += _SLO_COLUMNS
    if _with_cost(levels):
        header.append(_COST_COLUMN)
    if _with_telemetry(levels):
        header += _TELEMETRY_COLUMNS
    return header


def sweep_rows(levels: Sequence[LevelSummary]) -> list[list[str]]:
    """The table's cells as text, shared by the terminal table and report.md."""
    with_slo, with_telemetry = _with_slo(levels), _with_telemetry(levels)
    with_cost = _with_cost(levels)
    rows = []
    for s in levels:
        load = (
            _load(s)
            + (" *" if _client_bound(s) else "")
            + (" (interrupted)" if s.interrupted else "")
        )
        row = [
            load,
            _rate(s.total_throughput),
            _rate(s.output_throughput),
            _rate(s.max_output_tokens_per_s, "{:,.0f}"),
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
        if with_cost:
            row.append(usd_text(s.cost.usd_per_m_total_tokens if s.cost else None))
        if with_telemetry:
            row += _telemetry_cells(s.telemetry)
        rows.append(row)
    return rows


def render_sweep(levels: Sequence[LevelSummary], *, title: str | None = None) -> Table:
    """A Rich table of the sweep; '*' marks a level where the client may have been the limit."""
    table = Table(title=title, caption=_caption(levels), caption_justify="left")
    for i, name in enumerate(sweep_header(levels)):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in sweep_rows(levels):
        table.add_row(*row)
    return table


def _with_slo(levels: Sequence[LevelSummary]) -> bool:
    return any(s.slo_ms for s in levels)


def _with_cost(levels: Sequence[LevelSummary]) -> bool:
    """A priced run: USD per million total tokens at its price (bench.cost)."""
    return any(s.cost is not None and s.cost.usd_per_m_total_tokens is not None for s in levels)


def _with_telemetry(levels: Sequence[LevelSummary]) -> bool:
    return any(s.telemetry is not None for s in levels)


def _telemetry_cells(telemetry: LevelTelemetry | None) -> list[str]:
    """GPU cells read n/a when NVML was not sampled, engine cells when /metrics was not."""
    na = "n/a"
    gpu = telemetry.gpu.overall if telemetry and telemetry.gpu.available else None
    engine = telemetry.engine if telemetry and telemetry.engine.available else None
    return [
        na if gpu is None else _num(gpu.power_mean_pct, "{:.0f}"),
        na if gpu is None else _num(gpu.util_mean_pct, "{:.0f}"),
        na if gpu is None else _num(gpu.gpm_sm_util_mean_pct, "{:.0f}"),
        na if telemetry is None else _num(telemetry.gpu.tokens_per_joule, "{:,.2f}"),
        na if engine is None else _num(engine.running_mean, "{:.1f}"),
        na if engine is None else _num(engine.queued_mean, "{:.1f}"),
        na if engine is None else _num(_pct(engine.kv_usage_mean), "{:.0f}"),
    ]


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else 100 * fraction


def _caption(levels: Sequence[LevelSummary]) -> str | None:
    if any(_client_bound(s) for s in levels):
        return "* client-bound: the load generator's lag or CPU may have limited this level"
    return None
