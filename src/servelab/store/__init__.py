"""Run directories and the catalogue of runs."""

from servelab.store.catalog import CatalogRow, list_runs, record_run
from servelab.store.rundir import (
    DEFAULT_RUNS_DIR,
    DIAGNOSIS_FILE,
    ENGINE_EVENTS_FILE,
    ENGINE_LOG_FILE,
    METRICS_FILE,
    PROBE_FILE,
    REPORT_HTML_FILE,
    REPORT_MD_FILE,
    REQUESTS_FILE,
    SUMMARY_FILE,
    TELEMETRY_FILE,
    TWIN_FILE,
    RunDir,
    default_run_name,
    open_run,
)

__all__ = [
    "DEFAULT_RUNS_DIR",
    "DIAGNOSIS_FILE",
    "ENGINE_EVENTS_FILE",
    "ENGINE_LOG_FILE",
    "METRICS_FILE",
    "PROBE_FILE",
    "REPORT_HTML_FILE",
    "REPORT_MD_FILE",
    "REQUESTS_FILE",
    "SUMMARY_FILE",
    "TELEMETRY_FILE",
    "TWIN_FILE",
    "CatalogRow",
    "RunDir",
    "default_run_name",
    "list_runs",
    "open_run",
    "record_run",
]
