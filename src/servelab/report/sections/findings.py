"""Section 5, the findings: diagnose's explanation of the run (the layers of the gap, each
finding with its evidence and actions) and the server's warnings from its log."""

from __future__ import annotations

from servelab.diagnose import Diagnosis, Finding, GapLayers
from servelab.engines.signatures import KIND_INFO, LogScan
from servelab.report.diagnosis import evidence_text
from servelab.report.document import Block, Bullets, Paragraph, Section, Table, Tone
from servelab.report.inputs import ReportRun
from servelab.report.plots import run_origin_ns
from servelab.report.plots.engine_events import event_time_text
from servelab.report.sections._common import sentence, tone_of
from servelab.report.sections.profile import profile_section
from servelab.store import ENGINE_LOG_FILE

__all__ = ["findings_section"]


def findings_section(run: ReportRun) -> Section:
    diagnosis = run.diagnosis
    if diagnosis is None:
        blocks: list[Block] = [
            Paragraph("Not diagnosed: run servelab diagnose RUN_DIR to explain the run.")
        ]
    else:
        blocks = _diagnosis(diagnosis)
    subsections = [Section("warnings", "Server warnings", _warnings(run.events, run))]
    profile = profile_section(run.traces)
    if profile is not None:
        subsections.insert(0, profile)
    return Section("findings", "Findings", blocks, subsections=subsections)


def _diagnosis(diagnosis: Diagnosis) -> list[Block]:
    blocks: list[Block] = [
        Paragraph(
            f"Deployment modelled: {diagnosis.deployment or 'none'}. "
            f"{sentence(diagnosis.knee.explanation)}"
        )
    ]
    if not diagnosis.findings:
        missing = [n for n, s in diagnosis.sources.items() if not s.available]
        text = "No finding: nothing in the evidence stands out."
        if missing:
            text += f" To explain more, diagnose lacks: {', '.join(missing)}."
        blocks.append(Paragraph(text))
    for i, finding in enumerate(diagnosis.findings, 1):
        blocks += _finding(i, finding)
    for layers in diagnosis.layers:
        blocks.append(_layers(layers))
    items: list[tuple[Tone, str, list[str]]] = []
    for name, status in diagnosis.sources.items():
        mark = "yes" if status.available else "no"
        items.append(
            ("good" if status.available else "warn", f"{name}: {mark}, {status.detail}", [])
        )
    items += [("plain", note, []) for note in diagnosis.notes]
    blocks += [Paragraph("The evidence it had:"), Bullets(items)]
    return blocks


def _finding(index: int, finding: Finding) -> list[Block]:
    head = (
        f"{index}. {finding.severity.value} · {finding.kind.value} · "
        f"{finding.confidence:.0%} confident: {finding.title}"
    )
    items: list[tuple[Tone, str, list[str]]] = [
        ("plain", "evidence", [evidence_text(e) for e in finding.evidence]),
    ]
    if finding.actions:
        items.append(("good", "try", [a.text for a in finding.actions]))
    if finding.expected_gain is not None:
        items.append(("info", f"expected: {finding.expected_gain.text}", []))
    if finding.missing:
        items.append(("warn", "missing evidence", list(finding.missing)))
    return [
        Paragraph(head, tone_of(finding.severity)),
        Paragraph(finding.explanation),
        Bullets(items),
    ]


def _layers(layers: GapLayers) -> Table:
    rows = [
        [
            layer.name,
            "-" if layer.ms_per_token is None else f"{layer.ms_per_token:,.3g}",
            "-" if layer.tokens_per_s is None else f"{layer.tokens_per_s:,.1f}",
            layer.source if layer.available else layer.note or layer.source,
        ]
        for layer in layers.layers
    ]
    shares = "; ".join(f"{s.share:.0%} {s.what}" for s in layers.shares)
    caption = (
        f"The gap at {layers.point} (level {layers.level}, concurrency {layers.concurrency:g}, "
        f"batch {layers.batch:g})" + (f": {shares}" if shares else "")
    )
    return Table(
        ["layer", "ms per token", "tok/s per stream", "source"],
        rows,
        caption=caption,
        right=frozenset({1, 2}),
    )


def _warnings(scan: LogScan | None, run: ReportRun) -> list[Block]:
    if scan is None:
        why = (
            "the engine was not launched by servelab"
            if not run.engine
            else "its log was not scanned"
        )
        return [Paragraph(f"No engine log signatures: {why}.")]
    if not scan.events:
        return [
            Paragraph(f"No known signature in {scan.lines:,} lines of {ENGINE_LOG_FILE}.", "good")
        ]
    origin = run_origin_ns(run.records)
    items: list[tuple[Tone, str, list[str]]] = []
    timed = False
    for event in sorted(scan.events, key=lambda e: (e.severity.rank, e.line_no)):
        repeated = f" (x{event.count})" if event.count > 1 else ""
        when = event_time_text(event, origin)
        timed = timed or when is not None
        at = f" at {when}" if when is not None else ""
        sub = [f"line {event.line_no}{at}: {event.text}"]
        if event.severity.value != "info":
            sub.append(f"try: {KIND_INFO[event.kind].advice}")
        items.append(
            (tone_of(event.severity), f"{event.severity.value} {event.kind.value}{repeated}", sub)
        )
    clock = (
        " (times: seconds since the first measured request, as on the engine timeline; "
        "a repeated message at its first occurrence)"
        if timed
        else ""
    )
    return [
        Paragraph(f"From {scan.lines:,} lines of {ENGINE_LOG_FILE}{clock}:"),
        Bullets(items),
    ]
