"""Pure renderers: results in, tables and documents out; nothing is printed here."""

from servelab.report.markdown import render_run_report
from servelab.report.model import render_model_comparison, render_model_report
from servelab.report.probe import render_probe
from servelab.report.tables import render_sweep, sweep_header, sweep_rows
from servelab.report.verdicts import render_verdicts, verdict_markdown

__all__ = [
    "render_model_comparison",
    "render_model_report",
    "render_probe",
    "render_run_report",
    "render_sweep",
    "render_verdicts",
    "sweep_header",
    "sweep_rows",
    "verdict_markdown",
]
