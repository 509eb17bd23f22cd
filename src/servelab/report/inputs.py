"""One run directory as the report reads it: every file, typed, each optional part absent
with the reason, so a section can say what it could not show.

Only summary.json is required (a run imported from a peer's file may hold nothing else),
and one that cannot be read is bad input: one ConfigError line. An optional document that
cannot be read (written by another servelab version, say) is left out with a note, so one
stale file does not cost the whole report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from servelab.bench.cost import price_over, priced, resolve_price
from servelab.bench.cost_results import HourlyPrice, Price
from servelab.bench.profile_summary import load_trace_summaries
from servelab.bench.quality.results import QUALITY_FILE, QualityResult
from servelab.bench.results import BenchSummary
from servelab.core.errors import ConfigError
from servelab.diagnose import Diagnosis
from servelab.engines.base import EngineSpec
from servelab.engines.signatures import LogScan
from servelab.probe.report import ProbeReport
from servelab.store import (
    DIAGNOSIS_FILE,
    ENGINE_EVENTS_FILE,
    METRICS_FILE,
    PROBE_FILE,
    REQUESTS_FILE,
    TELEMETRY_FILE,
    TWIN_FILE,
    RunDir,
    open_run,
)
from servelab.trace import TraceSummary
from servelab.twin.result import TwinResult

__all__ = ["ReportRun", "load_report_run"]

_Doc = TypeVar("_Doc", bound=BaseModel)


@dataclass(frozen=True)
class ReportRun:
    """What one run directory holds for the report."""

    path: Path
    summary: BenchSummary
    probe: ProbeReport | None = None
    diagnosis: Diagnosis | None = None
    twin: TwinResult | None = None
    """twin.json: the engine fitted from the run and its levels replayed (diagnose)."""
    events: LogScan | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    telemetry_rows: list[dict[str, Any]] = field(default_factory=list)
    metrics_rows: list[dict[str, Any]] = field(default_factory=list)
    traces: list[TraceSummary] = field(default_factory=list)
    """The profiled level's trace summaries (trace_summary.json)."""
    quality: QualityResult | None = None
    """quality.json: the quality probe's passes, comparisons and verdicts (--quality)."""
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.summary.run.name

    @property
    def engine(self) -> dict[str, Any]:
        """summary.json's record of a launched engine; empty when none was launched here."""
        return dict(self.summary.engine or {})

    @property
    def gpu_count(self) -> int:
        """GPUs sampled for the run (its engine's), else the probe's, else 1."""
        started = [r for r in self.telemetry_rows if r.get("kind") == "start"]
        gpus = {r.get("gpu") for r in started if r.get("gpu") is not None}
        if gpus:
            return len(gpus)
        if self.probe is not None and self.probe.gpus is not None and self.probe.gpus.gpus:
            return len(self.probe.gpus.gpus)
        return 1


def load_report_run(path: Path, *, price: HourlyPrice | None = None) -> ReportRun:
    """Read `path`; a ConfigError where it is not a run directory or a file is not valid.

    Every level's cost is computed afresh from its own fields (bench.cost), at `price` where
    given (it overrides the run's own), else at the price the run recorded, so a run from
    before costs were recorded gets its energy per token too."""
    run, summary = open_run(path, BenchSummary, reader="report")
    notes: list[str] = []
    probe = _optional(run, PROBE_FILE, ProbeReport, notes)
    return ReportRun(
        path=path,
        summary=priced(summary, _price(summary, price, probe)),
        probe=probe,
        diagnosis=_optional(run, DIAGNOSIS_FILE, Diagnosis, notes),
        twin=_optional(run, TWIN_FILE, TwinResult, notes),
        events=_optional(run, ENGINE_EVENTS_FILE, LogScan, notes),
        records=_rows(run, REQUESTS_FILE, _is_record, notes),
        telemetry_rows=_rows(run, TELEMETRY_FILE, _is_sample, notes),
        metrics_rows=_rows(run, METRICS_FILE, _is_sample, notes),
        traces=_traces(path, notes),
        quality=_optional(run, QUALITY_FILE, QualityResult, notes),
        notes=notes,
    )


def _price(
    summary: BenchSummary, given: HourlyPrice | None, probe: ProbeReport | None
) -> Price | None:
    """The run's price, or `given` over the run's GPUs: the count its own price recorded,
    else its engine's spec, the GPUs it sampled, or its probe's."""
    own = summary.price
    if given is None:
        return own
    if own is not None and own.gpus is not None:
        return price_over(given, own.gpus, own.gpus_source)
    sampled = sorted(
        {
            stats.gpu
            for level in summary.levels
            if level.telemetry is not None
            for stats in level.telemetry.gpu.gpus
            if stats.gpu is not None
        }
    )
    return resolve_price(given, spec=_spec(summary), gpus=sampled, probe=probe)


def _spec(summary: BenchSummary) -> EngineSpec | None:
    """The launched engine's spec as summary.json recorded it; None when none was launched."""
    text = (summary.engine or {}).get("spec")
    if not isinstance(text, str):
        return None
    import yaml

    from servelab.engines.spec import parse_spec

    try:
        document = yaml.safe_load(text)
        return parse_spec(document, source="summary.json") if isinstance(document, dict) else None
    except (yaml.YAMLError, ConfigError):
        return None


def _traces(path: Path, notes: list[str]) -> list[TraceSummary]:
    try:
        return load_trace_summaries(path)
    except ConfigError as exc:
        notes.append(f"trace summaries not shown: {exc}")
        return []


def _rows(
    run: RunDir, filename: str, valid: Callable[[dict[str, Any]], bool], notes: list[str]
) -> list[dict[str, Any]]:
    """The rows the plots can read; others (another servelab's, a hand edit's) are noted."""
    rows, dropped = [], 0
    for row in run.iter_jsonl(filename):
        if valid(row):
            rows.append(row)
        else:
            dropped += 1
    if dropped:
        notes.append(f"{filename}: {dropped} row(s) of another shape left out of the plots")
    return rows


def _ints(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) for v in value)


def _is_record(row: dict[str, Any]) -> bool:
    """A requests.jsonl row with what the plots read (RequestRecord.to_json)."""
    tokens = row.get("chunk_tokens")
    return (
        all(isinstance(row.get(k), int) for k in ("level", "t_send_ns", "t_end_ns"))
        and all(isinstance(row.get(k), bool) for k in ("ok", "warmup"))
        and _ints(row.get("chunk_offsets_ns", []))
        and (tokens is None or (_ints(tokens) and len(tokens) == len(row["chunk_offsets_ns"])))
    )


_STAMPED = frozenset({"gpu", "gpm", "pcie", "metrics", "start"})


def _is_sample(row: dict[str, Any]) -> bool:
    """A telemetry or metrics row: samples carry their time (and GPU), the rest a reason."""
    kind = row.get("kind")
    if kind in _STAMPED and not isinstance(row.get("t_ns"), int | float):
        return False
    if kind in {"gpu", "gpm", "pcie"} and not isinstance(row.get("gpu"), int):
        return False
    return kind != "unavailable" or isinstance(row.get("reason"), str)


def _optional(run: RunDir, filename: str, model: type[_Doc], notes: list[str]) -> _Doc | None:
    try:
        return run.load(filename, model)
    except ConfigError as exc:
        notes.append(f"{filename} left out: {exc}")
        return None
