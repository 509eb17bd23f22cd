"""Pure renderers: results in, tables and documents out; nothing is printed here.

`write_report` is the one writer: the run's report.html and report.md (report.write);
`write_study_report` writes a tuning study's (report.study) with the same machinery.
"""

from servelab.report.capacity import render_capacity
from servelab.report.model import render_model_comparison, render_model_report
from servelab.report.probe import render_probe
from servelab.report.study import is_study_dir, write_study_report
from servelab.report.tables import render_sweep, sweep_header, sweep_rows
from servelab.report.targets import TARGETS, Target, TargetResult, evaluate_targets, parse_target
from servelab.report.verdicts import render_verdicts
from servelab.report.write import ReportFiles, write_report, write_run_report

__all__ = [
    "TARGETS",
    "ReportFiles",
    "Target",
    "TargetResult",
    "evaluate_targets",
    "is_study_dir",
    "parse_target",
    "render_capacity",
    "render_model_comparison",
    "render_model_report",
    "render_probe",
    "render_sweep",
    "render_verdicts",
    "sweep_header",
    "sweep_rows",
    "write_report",
    "write_run_report",
    "write_study_report",
]
