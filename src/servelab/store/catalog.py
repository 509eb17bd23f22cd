"""The catalogue: one SQLite row per run, in the runs folder, to find runs again."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path

from servelab.core.redact import scrub

__all__ = ["CATALOG_FILENAME", "CatalogRow", "list_runs", "record_run"]

CATALOG_FILENAME = "catalog.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    path TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    started_utc TEXT NOT NULL,
    target TEXT NOT NULL,
    status TEXT NOT NULL,
    levels INTEGER NOT NULL,
    best_output_throughput REAL,
    best_total_throughput REAL
)
"""


@dataclass(frozen=True, slots=True)
class CatalogRow:
    """What the catalogue keeps of a run."""

    path: str
    name: str
    kind: str
    started_utc: str
    target: str
    status: str
    levels: int
    best_output_throughput: float | None
    best_total_throughput: float | None


def record_run(runs_root: Path, row: CatalogRow) -> None:
    """Insert or update the run's row (a run is recorded when it starts and when it ends)."""
    with closing(sqlite3.connect(runs_root / CATALOG_FILENAME, timeout=10)) as db, db:
        db.execute(_SCHEMA)
        columns = {k: scrub(v) if isinstance(v, str) else v for k, v in asdict(row).items()}
        names = ", ".join(columns)
        marks = ", ".join(f":{name}" for name in columns)
        db.execute(f"INSERT OR REPLACE INTO runs ({names}) VALUES ({marks})", columns)


def list_runs(runs_root: Path) -> list[CatalogRow]:
    """Every catalogued run, oldest first."""
    path = runs_root / CATALOG_FILENAME
    if not path.exists():
        return []
    with closing(sqlite3.connect(path, timeout=10)) as db:
        db.execute(_SCHEMA)
        rows = db.execute(
            "SELECT path, name, kind, started_utc, target, status, levels,"
            " best_output_throughput, best_total_throughput FROM runs ORDER BY started_utc"
        ).fetchall()
    return [CatalogRow(*row) for row in rows]
