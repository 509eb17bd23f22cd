"""A run directory: the one place a run's results go, written as they are measured.

Every file of a run is named here and written and read through `RunDir`, so each command
opens a run the same way. JSON Lines files are appended and flushed per batch, so a crash
or Ctrl-C keeps every finished request; JSON documents are replaced atomically, so a
reader never sees half of one. Everything written is scrubbed of the secrets servelab was
handed (core.redact).

The loaders take the pydantic class of the document (`run.load_summary(BenchSummary)`):
the classes live in layers above `store`, which may not import them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from servelab.core.errors import ConfigError
from servelab.core.redact import scrub_bytes, scrub_json

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
    "RunDir",
    "default_run_name",
    "open_run",
]

DEFAULT_RUNS_DIR = Path("servelab-runs")

SUMMARY_FILE = "summary.json"
"""bench.BenchSummary, replaced after every level."""
REQUESTS_FILE = "requests.jsonl"
"""One bench.RequestRecord per line, appended as requests finish."""
TELEMETRY_FILE = "telemetry.jsonl"
"""GPU samples (telemetry.gpu), appended as they are taken."""
METRICS_FILE = "metrics.jsonl"
"""Engine /metrics scrapes (telemetry.scrape), appended as they are taken."""
ENGINE_LOG_FILE = "engine.log"
"""A launched engine's stdout and stderr, each line stamped (engines.enginelog)."""
ENGINE_EVENTS_FILE = "engine_events.json"
"""engines.LogScan: the known signatures the engine log matched, and how it died."""
PROBE_FILE = "probe.json"
"""probe.ProbeReport of the machine the run ran on."""
DIAGNOSIS_FILE = "diagnosis.json"
"""diagnose.Diagnosis of the run."""
TWIN_FILE = "twin.json"
"""twin.TwinResult: the engine fitted from the run and its levels replayed (diagnose)."""
REPORT_MD_FILE = "report.md"
REPORT_HTML_FILE = "report.html"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_Doc = TypeVar("_Doc", bound=BaseModel)


def open_run(path: Path, summary_model: type[_Doc], *, reader: str) -> tuple[RunDir, _Doc]:
    """An existing run directory and its summary: one ConfigError line where `path` is not
    a folder or holds no summary; `reader` says which command reads it, for the hint."""
    if not path.is_dir():
        raise ConfigError(f"no run directory at {path}")
    run = RunDir(path)
    summary = run.load_summary(summary_model)
    if summary is None:
        raise ConfigError(
            f"{path} has no {SUMMARY_FILE}",
            hint=f"{reader} reads run directories written by servelab run, bench or import",
        )
    return run, summary


def default_run_name(target: str) -> str:
    """A folder-safe name from a target such as 'http://127.0.0.1:8000' -> '127.0.0.1-8000'."""
    name = re.sub(r"^[a-z]+://", "", target).strip("/")
    return _UNSAFE.sub("-", name).strip("-")[:60] or "run"


class RunDir:
    """The folder of one run, and its open JSON Lines files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._files: dict[str, IO[bytes]] = {}

    @classmethod
    def create(cls, *, name: str, out: Path | None = None, root: Path | None = None) -> RunDir:
        """`out` exactly, else `<root>/<UTC time>-<name>/`; refuses a non-empty `out`."""
        if out is None:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            out = (root or DEFAULT_RUNS_DIR) / f"{stamp}-{_UNSAFE.sub('-', name)}"
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ConfigError(f"output folder {out} exists and is not empty", hint="pick another")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create output folder {out}: {exc.strerror}") from None
        return cls(out)

    @property
    def runs_root(self) -> Path:
        """The folder holding this run and the catalogue."""
        return self.path.parent

    @property
    def engine_log_path(self) -> Path:
        """Where a launched engine's log goes (written by the engine's log reader)."""
        return self.path / ENGINE_LOG_FILE

    # Writers, one per file the run's own code writes.

    def append_requests(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append finished requests (RequestRecord.to_json rows) to requests.jsonl."""
        self.append_jsonl(REQUESTS_FILE, rows)

    def write_summary(self, summary: BaseModel) -> Path:
        return self.write_json(SUMMARY_FILE, summary)

    def write_probe(self, probe: BaseModel) -> Path:
        return self.write_text(PROBE_FILE, probe.model_dump_json(by_alias=True, indent=2) + "\n")

    def write_engine_events(self, scan: BaseModel) -> Path:
        return self.write_text(ENGINE_EVENTS_FILE, scan.model_dump_json(indent=2) + "\n")

    def write_diagnosis(self, diagnosis: BaseModel) -> Path:
        return self.write_json(DIAGNOSIS_FILE, diagnosis)

    def write_report_md(self, text: str) -> Path:
        return self.write_text(REPORT_MD_FILE, text)

    def write_report_html(self, html: str) -> Path:
        return self.write_text(REPORT_HTML_FILE, html)

    # Typed loaders: None where the file is absent, a ConfigError where it is not valid.

    def load_summary(self, model: type[_Doc]) -> _Doc | None:
        return self.load(SUMMARY_FILE, model)

    def load_probe(self, model: type[_Doc]) -> _Doc | None:
        return self.load(PROBE_FILE, model)

    def load_engine_events(self, model: type[_Doc]) -> _Doc | None:
        return self.load(ENGINE_EVENTS_FILE, model)

    def load_diagnosis(self, model: type[_Doc]) -> _Doc | None:
        return self.load(DIAGNOSIS_FILE, model)

    def load(self, filename: str, model: type[_Doc]) -> _Doc | None:
        """The document in `filename` as `model`."""
        path = self.path / filename
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        try:
            return model.model_validate_json(data)
        except ValidationError as exc:
            raise ConfigError(f"{path} is not a valid {filename}: {_first_error(exc)}") from None

    def iter_jsonl(self, filename: str) -> Iterator[dict[str, Any]]:
        """The rows of a JSON Lines file (none where it is absent); a torn last line, left
        by a crash mid-write, is skipped."""
        path = self.path / filename
        if not path.exists():
            return
        with path.open("rb") as handle:
            for line in handle:
                try:
                    row = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    yield row

    # The generic writers the typed ones are built on.

    def append_jsonl(self, filename: str, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows and flush them to the OS."""
        handle = self._files.get(filename)
        if handle is None:
            handle = self._files[filename] = (self.path / filename).open("ab")
        handle.write(scrub_json(b"".join(orjson.dumps(row) + b"\n" for row in rows)))
        handle.flush()

    def write_json(self, filename: str, document: Any) -> Path:
        """Replace `filename` atomically with `document` (a dict or a pydantic model)."""
        payload = (
            document.model_dump(mode="json", by_alias=True)
            if isinstance(document, BaseModel)
            else document
        )
        return self._replace(
            filename, scrub_json(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
        )

    def write_json_text(self, filename: str, text: str) -> Path:
        """Replace `filename` atomically with JSON already serialised (a model's own
        `model_dump_json`, which keeps its NaN and infinities as it defines them); only its
        strings are scrubbed, so a secret that reads like digits never breaks a number."""
        return self._replace(filename, scrub_json(text.encode()))

    def write_text(self, filename: str, text: str) -> Path:
        return self.write_bytes(filename, text.encode())

    def write_bytes(self, filename: str, data: bytes) -> Path:
        return self._replace(filename, scrub_bytes(data))

    def _replace(self, filename: str, data: bytes) -> Path:
        target = self.path / filename
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return target

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "document"
    return f"{where}: {error['msg']}"
