"""Run directories and the catalogue of runs."""

from servelab.store.catalog import CatalogRow, list_runs, record_run
from servelab.store.rundir import RunDir, default_run_name

__all__ = ["CatalogRow", "RunDir", "default_run_name", "list_runs", "record_run"]
