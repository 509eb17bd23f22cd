"""Rich rendering of a probe report: facts, GPU matrix, measurements, verdicts."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servelab.probe.gpus import GpuInventory
from servelab.probe.report import ProbeReport
from servelab.report.probe_rows import RowTable, comm_tables, gpu_table, host_rows, pair_matrix
from servelab.report.verdicts import render_verdicts

__all__ = ["render_probe"]


def render_probe(report: ProbeReport) -> RenderableType:
    """The whole report, in reading order: host, GPUs, pairs, measurements, verdicts."""
    parts: list[RenderableType] = [_host(report)]
    if report.gpus is not None and report.gpus.gpus:
        parts.append(_table(gpu_table(report.gpus)))
        if report.gpus.pairs:
            parts.append(_pairs(report.gpus))
    if report.comm is not None:
        parts += [_table(t) for t in comm_tables(report.comm)]
        if report.comm.skipped:
            skipped = "; ".join(f"{k}: {v}" for k, v in report.comm.skipped.items())
            parts.append(Text(f"not measured: {skipped}", style="dim"))
    parts.append(render_verdicts(report.verdicts))
    return Group(*parts)


def _host(report: ProbeReport) -> Table:
    table = Table(title="Host", show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in host_rows(report):
        table.add_row(escape(name), escape(value))
    return table


def _table(rows: RowTable) -> Table:
    table = Table(title=escape(rows.title), title_justify="left")
    for i, name in enumerate(rows.header):
        table.add_column(escape(name), justify="right" if i in rows.right else "left")
    for r, row in enumerate(rows.rows):
        table.add_row(
            *(
                f"[red]{escape(cell)}[/red]" if (r, c) in rows.bad else escape(cell)
                for c, cell in enumerate(row)
            )
        )
    return table


def _pairs(inventory: GpuInventory) -> Table:
    table = Table(
        title="GPU pairs: topology, P2P read/write (nvidia-smi topo words)", title_justify="left"
    )
    table.add_column("")
    matrix = pair_matrix(inventory)
    for b in range(len(matrix)):
        table.add_column(f"GPU{b}", justify="center")
    for a, row in enumerate(matrix):
        cells = [
            escape(cell.text)
            if cell.usable is None
            else f"[{'green' if cell.usable else 'red'}]{escape(cell.text)}[/]"
            for cell in row
        ]
        table.add_row(f"GPU{a}", *cells)
    return table
