"""The report of several runs: the same six sections, each run beside the others, and the
changes of every later run against the first with their noise bands and verdicts; a
Quality section after the results where any run was made with --quality."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from servelab import __version__
from servelab.report.compare.predictions import Checked, prediction_checks, prediction_table
from servelab.report.compare.quality import quality_comparison
from servelab.report.compare.verdicts import MetricDelta, compare_all
from servelab.report.document import Block, Paragraph, Report, Section, Table, Tone
from servelab.report.inputs import ReportRun
from servelab.report.sections.engine import engine_section
from servelab.report.sections.findings import findings_section
from servelab.report.sections.machine import machine_section
from servelab.report.sections.results import figures, plot_input, results_section
from servelab.report.sections.status import status_section
from servelab.report.targets import Target, evaluate_targets

__all__ = ["build_comparison", "run_labels"]

_TONE: dict[str, Tone] = {
    "better": "good",
    "worse": "bad",
    "within noise": "plain",
    "no band": "warn",
}
_HEADLINE_CHANGES = 3


def run_labels(runs: Sequence[ReportRun]) -> list[str]:
    """'A', 'B', ... in the order given: A is the baseline."""
    return [chr(ord("A") + i) if i < 26 else f"run {i + 1}" for i in range(len(runs))]


def build_comparison(
    runs: Sequence[ReportRun], *, targets: Sequence[Target] = (), title: str | None = None
) -> Report:
    """Runs[0] is the baseline; every other run is compared with it."""
    labels = run_labels(runs)
    deltas = compare_all(runs, labels)
    checked = prediction_checks(runs, labels)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    names = " · ".join(f"{label}: {run.name}" for label, run in zip(labels, runs, strict=True))
    return Report(
        title=title or f"servelab report: {' vs '.join(run.name for run in runs)}",
        subtitle=f"{len(runs)} runs compared, {labels[0]} the baseline · {names}",
        sections=[
            _goal(runs, labels, targets),
            _side_by_side("machine", "Machine", runs, labels, machine_section),
            _side_by_side("engine", "Engine", runs, labels, engine_section),
            _results(runs, labels, deltas, checked),
            *_present(quality_comparison(runs, labels)),
            _side_by_side("findings", "Findings", runs, labels, findings_section),
            _side_by_side("status", "Status", runs, labels, lambda r: status_section(r, targets)),
        ],
        generator=f"servelab {__version__}, {stamp}",
        headline=[(c.tone, f"{c.text}.") for c in checked]
        + [line for label in labels[1:] for line in _headline(label, deltas[label])],
    )


def _present(section: Section | None) -> list[Section]:
    return [] if section is None else [section]


def _goal(runs: Sequence[ReportRun], labels: list[str], targets: Sequence[Target]) -> Section:
    rows = [
        [label, run.name, run.summary.run.started_utc, str(run.path), run.summary.status]
        for label, run in zip(labels, runs, strict=True)
    ]
    blocks: list[Block] = [Table(["", "run", "started", "folder", "status"], rows)]
    if targets:
        results = [evaluate_targets(targets, run.summary.levels) for run in runs]
        table = [
            [target.text, target.goal, *(_met(r[i].met, r[i].detail) for r in results)]
            for i, target in enumerate(targets)
        ]
        blocks.append(Table(["target", "goal", *labels], table))
    else:
        blocks.append(Paragraph("No targets were given (--target total=1000, say)."))
    return Section("targets", "Goal and targets", blocks)


def _met(met: bool, detail: str) -> str:
    return detail if met else detail.replace("not met: ", "NOT MET: ", 1)


def _side_by_side(
    key: str,
    title: str,
    runs: Sequence[ReportRun],
    labels: list[str],
    build: Callable[[ReportRun], Section],
) -> Section:
    subsections = []
    for label, run in zip(labels, runs, strict=True):
        inner = build(run)
        subsections.append(Section(f"{key}-{label.lower()}", f"{label}: {run.name}", inner.blocks))
        subsections += [
            Section(f"{sub.key}-{label.lower()}", f"{label}: {sub.title}", sub.blocks)
            for sub in inner.subsections
        ]
    return Section(key, title, subsections=subsections)


def _results(
    runs: Sequence[ReportRun],
    labels: list[str],
    deltas: dict[str, list[MetricDelta]],
    checked: list[Checked],
) -> Section:
    blocks: list[Block] = [prediction_table(checked)] if checked else []
    for label, changes in deltas.items():
        if not changes:
            blocks.append(Paragraph(f"{label} and {labels[0]} share no load level to compare."))
            continue
        rows = [
            [
                d.load,
                d.metric.name,
                f"{d.a:,.4g}",
                f"{d.b:,.4g}",
                f"{d.change:+.1%}",
                "-" if d.band is None else f"{d.band.lo - 1:+.1%} to {d.band.hi - 1:+.1%}",
                d.verdict if d.band is not None else f"no band: {d.why_no_band}",
            ]
            for d in changes
        ]
        blocks.append(
            Table(
                ["load", "metric", labels[0], label, "change", "noise band", "verdict"],
                rows,
                caption=f"{label} against {labels[0]}",
                tones=[_TONE[d.verdict] for d in changes],
                right=frozenset({2, 3, 4, 5}),
            )
        )
    blocks.append(Paragraph(_band_note(deltas)))
    blocks += figures(
        [plot_input(run, f"{label}: {run.name}") for label, run in zip(labels, runs, strict=True)]
    )
    subsections = [
        Section(
            f"results-{label.lower()}",
            f"{label}: {run.name}",
            results_section(run, plots=False).blocks,
        )
        for label, run in zip(labels, runs, strict=True)
    ]
    return Section("results", "Results", blocks, subsections)


def _band_note(deltas: dict[str, list[MetricDelta]]) -> str:
    """How the bands were drawn, with the size of their family."""
    family = next((d.family for changes in deltas.values() for d in changes), 0)
    if family == 0:
        return (
            "No noise band is drawn: a band needs each run's per-request records, enough of "
            "them for its metric (docs/REPORT.md)."
        )
    share = 1 - 0.05 / family
    return (
        f"The {family} noise bands of this report hold together: the true changes all lie "
        f"within their bands 95% of the time (Bonferroni: each band is the central {share:.2%} "
        "of a bootstrap of the change, each run's own requests resampled in blocks of one "
        "concurrency's worth). A change is outside noise when its band leaves 0 out and it "
        "is 5% or more. A band sees each run's own requests, not a change of the machine "
        "between the runs (other work on it, its clocks): repeat a configuration to see that "
        "(docs/REPORT.md)."
    )


def _headline(label: str, changes: list[MetricDelta]) -> list[tuple[Tone, str]]:
    """The largest changes outside noise, and what stayed within it."""
    if not changes:
        return [("warn", f"{label}: no load level in common with the baseline.")]
    outside = sorted(
        (d for d in changes if d.verdict in ("better", "worse")),
        key=lambda d: -abs(d.change),
    )[:_HEADLINE_CHANGES]
    lines: list[tuple[Tone, str]] = [(_TONE[d.verdict], f"{label}: {d.text}.") for d in outside]
    calm = [d for d in changes if d.verdict == "within noise"]
    if not outside and calm:
        lines.append(("plain", f"{label}: every change within noise ({len(calm)} compared)."))
    single = [d for d in changes if d.metric.name == "single-stream tok/s"]
    if single and single[0] not in outside:
        lines.append(("plain", f"{label}: {single[0].text}."))
    unbanded = [d for d in changes if d.verdict == "no band"]
    if unbanded and not outside:
        lines.append(("warn", f"{label}: {unbanded[0].text}."))
    return lines
