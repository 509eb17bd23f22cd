"""Hand-built inputs for the report's tests: runs, probes, diagnoses, log events, records.

Levels and summaries come from tests.diagnose.builders (every other field neutral), so
these follow the schema as it grows; the probe is the committed H200 run's own probe.json.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from servelab.bench.knee import find_knee
from servelab.bench.records import RequestRecord
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.core.severity import Severity
from servelab.diagnose import Diagnosis
from servelab.diagnose.document import SourceStatus
from servelab.diagnose.findings import Action, Evidence, ExpectedGain, Finding, FindingKind
from servelab.engines.signatures import EventKind, LogEvent, LogScan
from servelab.probe.report import ProbeReport
from servelab.report.document import Block, Bullets, Code, KeyValues, Paragraph, Section, Table
from servelab.report.inputs import ReportRun
from tests.diagnose.builders import level, summary

REPO = Path(__file__).resolve().parents[2]
H200_RUN = REPO / "benchmarks" / "gpu" / "results" / "h200-diagnose" / "default"
MS = 1_000_000


def sweep() -> list[LevelSummary]:
    """1, 8, 32, 64: throughput grows to 32 and flattens at 64; TTFT p99 grows with load."""
    return [
        level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20, p99_ttft_ms=30),
        level(1, 8, total_tps=700, tpot_ms=15, ttft_ms=200, p99_ttft_ms=400),
        level(2, 32, total_tps=1200, tpot_ms=30, ttft_ms=900, p99_ttft_ms=1500),
        level(3, 64, total_tps=1150, tpot_ms=60, ttft_ms=3000, p99_ttft_ms=5000),
    ]


def bench_summary(
    levels: list[LevelSummary] | None = None,
    *,
    engine: dict[str, Any] | None = None,
    target: dict[str, Any] | None = None,
    **run_fields: Any,
) -> BenchSummary:
    """summary.json of `levels` (default: `sweep()`); `target` and `run_fields` update its run."""
    base = summary(sweep() if levels is None else levels, engine=engine)
    info = base.run.model_copy(
        update={"target": {**base.run.target, "api": "chat", "model": "tiny", **(target or {})}}
        | run_fields
    )
    return base.model_copy(update={"run": info})


def report_run(summary_: BenchSummary | None = None, **fields: Any) -> ReportRun:
    """A ReportRun as load_report_run would give it, without a folder."""
    return ReportRun(path=Path("hand-built"), summary=summary_ or bench_summary(), **fields)


def with_summary(run: ReportRun, **update: Any) -> ReportRun:
    return dataclasses.replace(run, summary=run.summary.model_copy(update=update))


def h200_probe() -> ProbeReport:
    """The committed H200 run's probe: one NVIDIA H200, a NUMA warning, a VM info."""
    return ProbeReport.model_validate_json((H200_RUN / "probe.json").read_text())


def finding(
    title: str,
    *,
    kind: FindingKind = FindingKind.RUNNING_REQUEST_CAP,
    severity: Severity = Severity.WARNING,
    actions: tuple[str, ...] = (),
    gain: float | None = None,
    evidence: tuple[Evidence, ...] = (),
) -> Finding:
    return Finding(
        kind=kind,
        title=title,
        severity=severity,
        confidence=0.8,
        evidence=list(evidence) or [Evidence(what="a number", value=1, source="summary.json")],
        explanation=f"why {title}",
        actions=[Action(text=text) for text in actions],
        expected_gain=None
        if gain is None
        else ExpectedGain(factor=gain, metric="total throughput", source="model", text=f"{gain}x"),
    )


def diagnosis(levels: list[LevelSummary], findings: list[Finding]) -> Diagnosis:
    return Diagnosis(
        run_dir="hand-built",
        run_name="hand-built",
        engine=None,
        deployment=None,
        time_scale=1.0,
        knee=find_knee(levels),
        findings=findings,
        sources={
            "summary": SourceStatus(available=True, detail="4 levels"),
            "gpu telemetry": SourceStatus(available=False, detail="no GPU was sampled"),
        },
    )


def event(kind: EventKind, severity: Severity, line_no: int, text: str, **fields: Any) -> LogEvent:
    return LogEvent(
        kind=kind,
        severity=severity,
        engine="sglang",
        signature=f"test.{kind.value}",
        line_no=line_no,
        text=text,
        fields=fields,
        last_line_no=line_no,
    )


def log_scan(*events: LogEvent, lines: int = 500) -> LogScan:
    counts: dict[EventKind, int] = {}
    for e in events:
        counts[e.kind] = counts.get(e.kind, 0) + e.count
    return LogScan(engine="sglang", lines=lines, events=list(events), counts=counts)


def record(level_index: int, t_send_ms: float, offsets_ms: list[float]) -> dict[str, Any]:
    """A requests.jsonl row: one text chunk (one token) at each offset after the send."""
    offsets = [round(ms * MS) for ms in offsets_ms]
    send = round(t_send_ms * MS)
    return RequestRecord(
        index=0,
        level=level_index,
        warmup=False,
        worker=0,
        t_send_ns=send,
        t_scheduled_ns=send,
        t_end_ns=send + offsets[-1],
        ok=True,
        max_tokens=len(offsets),
        chunk_offsets_ns=offsets,
        chunk_tokens=None,
        output_tokens=len(offsets),
    ).to_json()


def records(levels: list[LevelSummary]) -> list[dict[str, Any]]:
    """Four streamed requests per level, one after another."""
    return [
        record(lv.level, 1000.0 * lv.level + 100 * i, [20.0 + i, 30.0 + i, 45.0 + i])
        for lv in levels
        for i in range(4)
    ]


def blocks(section: Section, kind: type[Block]) -> list[Any]:
    """The blocks of one type in a section (not its subsections)."""
    return [b for b in section.blocks if isinstance(b, kind)]


def texts(section: Section) -> list[str]:
    """Every string of a section and its subsections, in order."""
    out: list[str] = []
    for b in section.blocks:
        if isinstance(b, Paragraph):
            out.append(b.text)
        elif isinstance(b, Bullets):
            for _, text, sub in b.items:
                out += [text, *sub]
        elif isinstance(b, KeyValues):
            out += [f"{k}: {v}" for k, v in b.rows]
        elif isinstance(b, Table):
            out += [" | ".join(row) for row in [b.header, *b.rows]]
        elif isinstance(b, Code):
            out.append(b.text)
    for sub in section.subsections:
        out += texts(sub)
    return out


def subsection(section: Section, key: str) -> Section:
    return next(s for s in section.subsections if s.key == key)
