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

from servelab.bench.profile_summary import load_trace_summaries
from servelab.bench.quality.results import QUALITY_FILE, QualityResult, load_quality
from servelab.bench.results import BenchSummary
from servelab.core.errors import ConfigError
from servelab.engines.registry import get_adapter
from servelab.engines.signatures import SIGNATURES, LogEvent, LogScan, scan_log
from servelab.probe.verdict import Verdict
from servelab.store import (
    ENGINE_EVENTS_FILE,
    ENGINE_LOG_FILE,
    METRICS_FILE,
    PROBE_FILE,
    RunDir,
    open_run,
)
from servelab.trace import TraceSummary

__all__ = ["ProbeDoc", "RunFiles", "load_run", "read_probe"]

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
    traces: list[TraceSummary] = field(default_factory=list)
    """The profiled level's trace summaries (trace_summary.json), where one was taken."""
    quality: QualityResult | None = None
    """quality.json: the quality probe's comparisons and verdicts (bench --quality)."""
    quality_source: str = ""
    """Where quality came from, or why it is absent."""


def load_run(path: Path, *, engine: str | None = None, probe: Path | None = None) -> RunFiles:
    """Read `path`; `engine` names the engine when the run does not, and `probe` (a
    probe.json) is used in place of the run's own."""
    run, summary = open_run(path, BenchSummary, reader="diagnose")
    if engine is not None:
        get_adapter(engine)  # an unknown name is a ConfigError with the closest known one
    name = engine or _run_engine(summary)
    events, events_source = _events(run, name)
    own = path / PROBE_FILE
    probe_path = probe if probe is not None else own if own.exists() else None
    doc = read_probe(probe_path) if probe_path is not None else None
    probe_source = str(probe_path) if doc else "no probe.json in the run and no --probe given"
    rows = [row for row in run.iter_jsonl(METRICS_FILE) if row.get("kind") == "metrics"]
    quality = load_quality(run)
    quality_source = (
        QUALITY_FILE if quality else f"no {QUALITY_FILE}: the run was made without --quality"
    )
    return RunFiles(
        path=path,
        summary=summary,
        engine=name,
        events=events,
        events_source=events_source,
        probe=doc,
        probe_source=probe_source,
        metric_rows=rows,
        traces=load_trace_summaries(path),
        quality=quality,
        quality_source=quality_source,
    )


def _read_json(path: Path, what: str) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None


def _run_engine(summary: BenchSummary) -> str | None:
    """The engine the run says served it: a launched engine's adapter, else the target's."""
    if summary.engine and isinstance(summary.engine.get("engine"), str):
        return str(summary.engine["engine"])
    target = summary.run.target.get("engine")
    return target if isinstance(target, str) and target != "openai" else None


def _events(run: RunDir, engine: str | None) -> tuple[list[LogEvent] | None, str]:
    scan = run.load_engine_events(LogScan)
    if scan is not None:
        return scan.events, f"{ENGINE_EVENTS_FILE} ({scan.lines:,} lines of {ENGINE_LOG_FILE})"
    log = run.engine_log_path
    if not log.exists():
        return None, "no engine.log: the engine was not launched by servelab"
    if engine is None or engine not in SIGNATURES:
        why = "the engine is unknown" if engine is None else f"no signatures for {engine!r}"
        return None, f"{ENGINE_LOG_FILE} not scanned: {why} (give --engine)"
    return scan_log(log, engine), f"{ENGINE_LOG_FILE} scanned as {engine}"


def read_probe(path: Path) -> ProbeDoc:
    """A `servelab probe` document from a file; a bad one is one ConfigError line."""
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
