"""Pure renderers: results in, tables and documents out; nothing is printed here."""

from servelab.report.markdown import render_run_report
from servelab.report.tables import render_sweep, sweep_header, sweep_rows

__all__ = ["render_run_report", "render_sweep", "sweep_header", "sweep_rows"]
