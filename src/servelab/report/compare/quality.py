"""Quality across runs: each run's verdicts and primary metrics side by side, and whether
every later run probed the baseline's probe set (the same prompts, byte for byte: only
then do their answers compare prompt for prompt, and only then can one be the other's
--quality-ref)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from servelab.bench.quality.results import QualityComparison, QualityResult
from servelab.report.document import Block, Bullets, Section, Table, Tone
from servelab.report.inputs import ReportRun
from servelab.report.sections.quality import verdict_text, worst_tone

__all__ = ["quality_comparison"]


def quality_comparison(runs: Sequence[ReportRun], labels: Sequence[str]) -> Section | None:
    """None where no run was made with --quality."""
    if all(run.quality is None for run in runs):
        return None
    kinds = list(
        dict.fromkeys(c.kind for run in runs if run.quality for c in run.quality.comparisons)
    )
    table: list[Block] = []
    if kinds:
        rows: list[list[str]] = []
        bad: set[tuple[int, int]] = set()
        for r, kind in enumerate(kinds):
            row: list[str] = [kind]
            for col, run in enumerate(runs, 1):
                found = _comparison(run.quality, kind)
                row.append(verdict_text(found) if found is not None else _absent(run.quality))
                if found is not None and found.verdict != "within_floor":
                    bad.add((r, col))
            rows.append(row)
        table.append(
            Table(
                ["comparison", *labels],
                rows,
                caption="Each run's verdicts, with its primary metric and floor",
                bad=frozenset(bad),
            )
        )
    return Section("quality", "Quality", [*table, Bullets(_probe_sets(runs, labels))])


def _comparison(quality: QualityResult | None, kind: str) -> QualityComparison | None:
    if quality is None:
        return None
    return next((c for c in quality.comparisons if c.kind == kind), None)


def _absent(quality: QualityResult | None) -> str:
    return "not probed" if quality is None else "not compared"


def _probe_sets(
    runs: Sequence[ReportRun], labels: Sequence[str]
) -> list[tuple[Tone, str, list[str]]]:
    """Each later run's probe set against the baseline's, and its reference run."""
    base, first = runs[0].quality, labels[0]
    items: list[tuple[Tone, str, list[str]]] = []
    for label, run in zip(labels, runs, strict=True):
        quality = run.quality
        if quality is None:
            items.append(("plain", f"{label} was not probed (made without --quality).", []))
            continue
        worst = worst_tone(quality.comparisons)
        detail = [
            f"{quality.n_probes} prompts, seed {quality.seed}, sha256 {quality.probe_set_digest}"
        ]
        if quality.reference_run:
            against = " (the baseline)" if _names(quality.reference_run, runs[0]) else ""
            detail.append(f"reference run: {quality.reference_run}{against}")
        if label == first or base is None:
            items.append((worst, f"{label}: probed.", detail))
        elif quality.probe_set_digest == base.probe_set_digest:
            items.append(
                (
                    worst,
                    f"{label} probed the same probe set as {first}: their answers compare "
                    "prompt for prompt.",
                    detail,
                )
            )
        else:
            items.append(
                (
                    "warn",
                    f"{label} probed another probe set than {first}: each verdict stands "
                    f"against its own floor, and {first} cannot be {label}'s --quality-ref.",
                    detail,
                )
            )
    return items


def _names(reference: str, run: ReportRun) -> bool:
    """Whether --quality-ref's RUN is this run: its folder or its name."""
    return reference in (run.name, str(run.path)) or Path(reference).name == run.path.name
