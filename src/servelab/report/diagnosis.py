"""A diagnosis as Rich tables: findings worst first, the layers, the sources.

Pure renderers: a `Diagnosis` in, renderables or text out; the CLI prints them (the
report's findings section is report.sections.findings).
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servelab.diagnose.document import Diagnosis, GapLayers
from servelab.diagnose.findings import Evidence, ExpectedGain, Finding, Severity
from servelab.diagnose.whatif_run import WhatIfResult

__all__ = ["evidence_text", "render_diagnosis", "render_what_if", "top_finding_lines"]

_STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "green"}
_EVIDENCE_SHOWN = 4


def render_diagnosis(diagnosis: Diagnosis) -> RenderableType:
    """The findings table, each finding's evidence and actions, the layers, the sources."""
    parts: list[RenderableType] = [_findings(diagnosis)]
    checks = diagnosis.predictions or (
        [diagnosis.prediction] if diagnosis.prediction is not None else []
    )
    for check in checks:
        style = {"inside": "green", "outside": "red"}.get(check.verdict, "yellow")
        parts.append(Text(f"prediction check: {check.text}", style=style))
    parts += [_details(i, finding) for i, finding in enumerate(diagnosis.findings, 1)]
    parts += [_layers(layers) for layers in diagnosis.layers]
    parts.append(_sources(diagnosis))
    return Group(*parts)


def _findings(diagnosis: Diagnosis) -> Table:
    table = Table(
        title=f"Diagnosis of {escape(diagnosis.run_name)}"
        + (f" ({escape(diagnosis.deployment)})" if diagnosis.deployment else ""),
        title_justify="left",
        caption=diagnosis.knee.explanation,
        caption_justify="left",
    )
    for name, justify in (
        ("#", "right"),
        ("severity", "left"),
        ("kind", "left"),
        ("confidence", "right"),
        ("finding", "left"),
        ("expected gain", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    if not diagnosis.findings:
        table.add_row("", "", "", "", "nothing in the evidence stands out", "")
    for i, finding in enumerate(diagnosis.findings, 1):
        gain = finding.expected_gain
        table.add_row(
            str(i),
            Text(finding.severity.value, style=_STYLE[finding.severity]),
            finding.kind.value,
            f"{finding.confidence:.0%}",
            escape(finding.title),
            escape(_gain_cell(gain)) if gain else "-",
        )
    return table


def _gain_cell(gain: ExpectedGain) -> str:
    """The point estimate, and the interval a measured factor is judged against."""
    if gain.low is None or gain.high is None:
        return f"{gain.factor:g}x {gain.metric}"
    return f"{gain.factor:g}x ({gain.low:g}-{gain.high:g}) {gain.metric}"


def _details(index: int, finding: Finding) -> Table:
    table = Table(
        title=f"{index}. {escape(finding.kind.value)}: {escape(finding.explanation)}",
        title_justify="left",
        show_header=False,
        box=None,
        pad_edge=False,
    )
    table.add_column(style="bold")
    table.add_column()
    shown = finding.evidence[:_EVIDENCE_SHOWN]
    for evidence in shown:
        table.add_row("evidence", escape(evidence_text(evidence)))
    if len(finding.evidence) > len(shown):
        table.add_row("", f"and {len(finding.evidence) - len(shown)} more (--json)")
    for action in finding.actions:
        table.add_row(f"try ({action.target})", escape(action.text))
    if finding.expected_gain is not None:
        table.add_row("expected", escape(finding.expected_gain.text))
    for missing in finding.missing:
        table.add_row("missing", escape(missing))
    return table


def _layers(layers: GapLayers) -> Table:
    table = Table(
        title=f"The gap at {layers.point} ({_point(layers)})",
        title_justify="left",
        caption=_shares_caption(layers),
        caption_justify="left",
    )
    for name, justify in (
        ("layer", "left"),
        ("ms per token", "right"),
        ("tok/s per stream", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("source", justify="left")
    for layer in layers.layers:
        table.add_row(
            escape(layer.name),
            _ms(layer.ms_per_token),
            _rate(layer.tokens_per_s),
            escape(layer.source if layer.available else layer.note or layer.source),
        )
    return table


def _sources(diagnosis: Diagnosis) -> Table:
    table = Table(title="Evidence", title_justify="left", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_column()
    for name, status in diagnosis.sources.items():
        mark = Text("yes", style="green") if status.available else Text("no", style="yellow")
        table.add_row(name, mark, escape(status.detail))
    if diagnosis.configuration:
        origins = sorted(
            {c.source.split(":")[0].split(" line")[0] for c in diagnosis.configuration}
        )
        table.add_row(
            "configuration",
            Text("yes", style="green"),
            f"{len(diagnosis.configuration)} settings read from {', '.join(origins)} (--json "
            "lists each with its source)",
        )
    for note in diagnosis.notes:
        table.add_row("note", "", escape(note))
    return table


def _point(layers: GapLayers) -> str:
    return f"level {layers.level}, concurrency {layers.concurrency:g}, batch {layers.batch:g}"


def _shares_caption(layers: GapLayers) -> str | None:
    if not layers.shares:
        return None
    parts = [f"{share.share:.0%} {share.what}" for share in layers.shares]
    gap = layers.gap_ms_per_token or 0.0
    return f"gap {gap:,.3g} ms per token: " + "; ".join(parts)


def evidence_text(evidence: Evidence) -> str:
    """'what: value unit [source]', and '(against)' for evidence against the finding."""
    unit = f" {evidence.unit}" if evidence.unit else ""
    against = " (against)" if not evidence.supports else ""
    return f"{evidence.what}: {evidence.value}{unit} [{evidence.source}]{against}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3g}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def top_finding_lines(diagnosis: Diagnosis) -> list[str]:
    """The last words of a run: its most important finding and what to try first."""
    if not diagnosis.findings:
        missing = [name for name, status in diagnosis.sources.items() if not status.available]
        if diagnosis.knee.found and missing:
            return [
                f"top finding: none; {diagnosis.knee.explanation.split(':')[0]}, but to say "
                f"why diagnose lacks: {', '.join(missing)}"
            ]
        return ["top finding: none (nothing in the evidence stands out)"]
    top = diagnosis.findings[0]
    lines = [f"top finding: {top.kind} ({top.severity}): {top.title}"]
    doable = [action for action in top.actions if action.available]
    if doable:
        lines.append(f"try first: {doable[0].text}")
    elif top.actions:
        lines.append(f"nothing to try on this engine: {top.actions[0].text}")
    return lines


def render_what_if(result: WhatIfResult) -> RenderableType:
    """Each level's metrics as measured and as the replay predicts them at the new values."""
    changes = ", ".join(
        f"{k}={'none' if v is None else f'{v:,}'}" for k, v in result.changes.items()
    )
    table = Table(title=f"what if {changes}", title_justify="left")
    for column in ("level", "metric", "measured", "predicted", "new / old", "interval"):
        table.add_column(column, justify="left" if column in ("level", "metric") else "right")
    for row in result.rows:
        table.add_row(
            row.load,
            row.metric,
            _number(row.measured),
            _number(row.predicted),
            f"{row.factor:.2f}x" if row.factor is not None else "-",
            f"{row.low:.2f}-{row.high:.2f}"
            if row.low is not None and row.high is not None
            else "-",
        )
    parts: list[RenderableType] = [Text(f"twin: {result.fitted_from}"), table]
    for why in result.extrapolated:
        parts.append(Text(f"extrapolated: {why}", style="yellow"))
    if result.refused:
        parts.append(Text(f"{result.refused} requests would not fit at all", style="red"))
    parts += [Text(f"note: {note}") for note in result.notes]
    return Group(*parts)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
