"""Reading a run directory: the files `diagnose` takes its evidence from.

summary.json is required; everything else is optional and, when absent, recorded with
the reason so the rules can say what they could not see. A file that is there but cannot
be read is bad input: one ConfigError line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from servelab.bench.results import SCHEMA as BENCH_SCHEMA
from servelab.bench.results import BenchSummary
from servelab.core.errors import ConfigError
from servelab.engines.registry import get_adapter
from servelab.engines.signatures import SIGNATURES, LogEvent, LogScan, scan_log
from servelab.probe.verdict import Verdict

__all__ = [
    "ENGINE_EVENTS_FILE",
    "ENGINE_LOG_FILE",
    "METRICS_FILE",
    "PROBE_FILE",
    "SUMMARY_FILE",
    "ProbeDoc",
    "RunFiles",
    "load_run",
]

SUMMARY_FILE = "summary.json"
ENGINE_EVENTS_FILE = "engine_events.json"
ENGINE_LOG_FILE = "engine.log"
METRICS_FILE = "metrics.jsonl"
PROBE_FILE = "probe.json"
_PROBE_SCHEMA = "servelab.probe/1"


@dataclass(frozen=True)
class ProbeDoc:
    """The parts of a probe document the rules read: its verdicts and the raw document."""

    source: str
    verdicts: list[Verdict]
    document: dict[str, Any]

    def verdict(self, *codes: str) -> list[Verdict]:
        """The verdicts with any of these codes."""
        return [v for v in self.verdicts if v.code in codes]


@dataclass(frozen=True)
class RunFiles:
    """What was read from one run directory, and why each optional part is missing."""

    path: Path
    summary: BenchSummary
    engine: str | None
    events: list[LogEvent] | None
    events_source: str
    probe: ProbeDoc | None
    probe_source: str
    metric_rows: list[dict[str, Any]] = field(default_factory=list)


def load_run(path: Path, *, engine: str | None = None, probe: Path | None = None) -> RunFiles:
    """Read `path`; `engine` names the engine when the run does not, and `probe` (a
    probe.json) is used in place of the run's own."""
    if not path.is_dir():
        raise ConfigError(f"no run directory at {path}")
    if engine is not None:
        get_adapter(engine)  # an unknown name is a ConfigError with the closest known one
    summary = _summary(path / SUMMARY_FILE)
    name = engine or _run_engine(summary)
    events, events_source = _events(path, name)
    own = path / PROBE_FILE
    probe_path = probe if probe is not None else own if own.exists() else None
    doc = _probe(probe_path) if probe_path is not None else None
    probe_source = str(probe_path) if doc else "no probe.json in the run and no --probe given"
    rows = _metric_rows(path / METRICS_FILE)
    return RunFiles(
        path=path,
        summary=summary,
        engine=name,
        events=events,
        events_source=events_source,
        probe=doc,
        probe_source=probe_source,
        metric_rows=rows,
    )


def _read_json(path: Path, what: str) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None


def _summary(path: Path) -> BenchSummary:
    if not path.exists():
        raise ConfigError(
            f"{path.parent} has no {SUMMARY_FILE}",
            hint="diagnose reads a run directory written by servelab bench or run",
        )
    document = _read_json(path, "summary")
    if not isinstance(document, dict) or document.get("schema") != BENCH_SCHEMA:
        schema = document.get("schema") if isinstance(document, dict) else None
        raise ConfigError(f"{path} is not a servelab summary (schema {schema!r})")
    try:
        return BenchSummary.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ()))
        raise ConfigError(f"{path}: {where}: {error['msg']}") from None


def _run_engine(summary: BenchSummary) -> str | None:
    """The engine the run says served it: a launched engine's adapter, else the target's."""
    if summary.engine and isinstance(summary.engine.get("engine"), str):
        return str(summary.engine["engine"])
    target = summary.run.target.get("engine")
    return target if isinstance(target, str) and target != "openai" else None


def _events(path: Path, engine: str | None) -> tuple[list[LogEvent] | None, str]:
    events_path = path / ENGINE_EVENTS_FILE
    if events_path.exists():
        try:
            scan = LogScan.model_validate(_read_json(events_path, "engine events"))
        except ValidationError as exc:
            raise ConfigError(f"{events_path}: {exc.errors()[0]['msg']}") from None
        return scan.events, f"{ENGINE_EVENTS_FILE} ({scan.lines:,} lines of {ENGINE_LOG_FILE})"
    log = path / ENGINE_LOG_FILE
    if not log.exists():
        return None, "no engine.log: the engine was not launched by servelab"
    if engine is None or engine not in SIGNATURES:
        why = "the engine is unknown" if engine is None else f"no signatures for {engine!r}"
        return None, f"{ENGINE_LOG_FILE} not scanned: {why} (give --engine)"
    return scan_log(log, engine), f"{ENGINE_LOG_FILE} scanned as {engine}"


def _probe(path: Path) -> ProbeDoc:
    if not path.exists():
        raise ConfigError(f"no probe file at {path}")
    document = _read_json(path, "probe file")
    if not isinstance(document, dict) or document.get("schema") != _PROBE_SCHEMA:
        raise ConfigError(f"{path} is not a servelab probe document")
    try:
        verdicts = [Verdict.model_validate(v) for v in document.get("verdicts") or []]
    except ValidationError as exc:
        raise ConfigError(f"{path}: a verdict is malformed: {exc.errors()[0]['msg']}") from None
    return ProbeDoc(source=str(path), verdicts=verdicts, document=document)


def _metric_rows(path: Path) -> list[dict[str, Any]]:
    """The /metrics scrapes (rows of kind 'metrics'); a torn last line is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("kind") == "metrics":
            rows.append(row)
    return rows
