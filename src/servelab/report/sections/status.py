"""Section 6, the status: what was measured, what is still open, and what to do next,
ranked by the gain diagnose expects."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.report.document import Block, Bullets, Paragraph, Section, Tone
from servelab.report.inputs import ReportRun
from servelab.report.targets import Target, evaluate_targets

__all__ = ["status_section"]


def status_section(run: ReportRun, targets: Sequence[Target]) -> Section:
    return Section(
        "status",
        "Status",
        subsections=[
            Section("done", "Done", _done(run)),
            Section("in-progress", "In progress", _open(run, targets)),
            Section("next", "Next", _next(run)),
        ],
    )


def _done(run: ReportRun) -> list[Block]:
    summary = run.summary
    levels = [s for s in summary.levels if s.completed != 0]
    items: list[tuple[Tone, str, list[str]]] = []
    if run.probe is not None:
        measured = " with measured rates" if run.probe.comm is not None else ""
        items.append(("good", f"machine probed{measured}: {len(run.probe.verdicts)} verdicts", []))
    if levels:
        loads = ", ".join(
            str(s.max_concurrency) if s.max_concurrency is not None else f"{s.request_rate:g}/s"
            for s in levels
        )
        requests = _total([s.completed for s in summary.levels])
        failed = _total([s.failed for s in summary.levels])
        best = max(levels, key=lambda s: s.total_throughput or 0.0)
        total = "-" if best.total_throughput is None else f"{best.total_throughput:,.0f}"
        items.append(
            (
                "good",
                f"{len(levels)} load levels measured ({loads}): {requests} requests completed, "
                f"{failed} failed; best {total} tok/s total",
                [],
            )
        )
    if run.quality is not None:
        verdicts = ", ".join(f"{c.kind} {c.verdict}" for c in run.quality.comparisons)
        items.append(
            (
                "good",
                f"quality probed: {run.quality.n_probes} prompts; {verdicts or 'no comparison'}",
                [],
            )
        )
    if run.diagnosis is not None:
        items.append(("good", f"diagnosed: {len(run.diagnosis.findings)} findings", []))
    if not items:
        return [Paragraph("Nothing measured yet.")]
    return [Bullets(items)]


def _open(run: ReportRun, targets: Sequence[Target]) -> list[Block]:
    items: list[tuple[Tone, str, list[str]]] = []
    if run.summary.status != "complete":
        why = f": {run.summary.failure}" if run.summary.failure else ""
        items.append(("warn", f"the run is {run.summary.status}{why}", []))
    for result in evaluate_targets(targets, run.summary.levels):
        if not result.met:
            items.append(("bad", f"target {result.target.text}: {result.detail}", []))
    if not items:
        return [Paragraph("Nothing open: the run is complete and every target given is met.")]
    return [Bullets(items)]


def _next(run: ReportRun) -> list[Block]:
    """Every action of every finding, the largest expected gain first."""
    if run.diagnosis is None:
        return [Paragraph("Diagnose the run (servelab diagnose) for the actions.")]
    ranked = sorted(
        (f for f in run.diagnosis.findings if f.actions),
        key=lambda f: (-(f.expected_gain.factor if f.expected_gain else 1.0), f.severity.rank),
    )
    items: list[tuple[Tone, str, list[str]]] = []
    for finding in ranked:
        gain = f" (expected {finding.expected_gain.text})" if finding.expected_gain else ""
        for action in finding.actions:
            items.append(("plain", f"{action.text}{gain}", [f"for: {finding.title}"]))
    if not items:
        return [Paragraph("No action: no finding calls for a change.")]
    return [Bullets(items)]


def _total(counts: list[int | None]) -> str:
    """The sum, or "-" where a level does not know its count (an imported run)."""
    return "-" if any(c is None for c in counts) else f"{sum(c for c in counts if c):,}"
