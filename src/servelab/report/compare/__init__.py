"""Several runs in one report: changes against the first run, with noise bands."""

from servelab.report.compare.sections import build_comparison, run_labels
from servelab.report.compare.verdicts import (
    MIN_EFFECT,
    MetricDelta,
    compare_all,
    compare_runs,
)

__all__ = [
    "MIN_EFFECT",
    "MetricDelta",
    "build_comparison",
    "compare_all",
    "compare_runs",
    "run_labels",
]
