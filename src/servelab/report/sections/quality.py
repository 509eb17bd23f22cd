"""The Quality section (where the run has a quality.json): what the reference was, each
comparison's primary metric with its interval, floor and verdict, errors by kind, whether
the engine gave logprobs, the probe's time, and where the worst probes' answers first
parted from the reference's (docs/QUALITY.md has the rules; the numbers are the probe's).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from servelab.bench.quality.results import (
    QualityComparison,
    QualityResult,
    Verdict,
    errors_text,
    output_faults,
)
from servelab.report.document import Block, Bullets, KeyValues, Paragraph, Section, Table, Tone
from servelab.report.inputs import ReportRun

__all__ = [
    "VERDICT_TONE",
    "quality_line",
    "quality_section",
    "tokens_text",
    "verdict_text",
    "worst_tone",
]

VERDICT_TONE: dict[Verdict, Tone] = {"within_floor": "good", "drift": "warn", "broken": "bad"}
_METRIC = {"mean_abs_dlogprob": "mean |Δlogprob| (nats)", "divergence_share": "diverging share"}


def quality_section(run: ReportRun) -> Section | None:
    """None where the run was made without --quality."""
    quality = run.quality
    if quality is None:
        return None
    blocks: list[Block] = [
        Paragraph(
            f"{quality.n_probes} prompts (seed {quality.seed}) answered greedily at "
            f"temperature 0: alone before and after the sweep{_loaded_clause(quality)}. "
            "Each comparison is judged on its primary metric against the floor, the "
            "larger of the measured self-difference and the metric's epsilon: drift when the "
            "lower end of the bootstrap interval over the probes exceeds it (docs/QUALITY.md)."
        ),
        KeyValues(_facts(quality)),
        *(Paragraph(note, "warn") for note in quality.notes),
    ]
    if not quality.comparisons:
        blocks.append(Paragraph("No comparison: the run holds fewer than two passes.", "warn"))
        return Section("quality", "Quality", blocks)
    blocks += [
        _verdicts(quality.comparisons),
        _metrics(quality.comparisons),
        Bullets(
            [
                (VERDICT_TONE[c.verdict], f"{c.kind}: {c.verdict}: {c.reason}", [])
                for c in quality.comparisons
            ]
        ),
    ]
    blocks += [_diff(c) for c in quality.comparisons if c.diff]
    if not any(c.diff for c in quality.comparisons):
        blocks.append(Paragraph(_no_diff(quality)))
    return Section("quality", "Quality", blocks)


def _no_diff(quality: QualityResult) -> str:
    """No diff to show: every answer alike only where every probe was compared."""
    every = all(c.metrics.probes == quality.n_probes for c in quality.comparisons)
    if not quality.errors and every:
        return "Every probe's greedy answer was the same in every pass."
    compared = ", ".join(
        f"{c.kind} {c.metrics.probes} of {quality.n_probes}" for c in quality.comparisons
    )
    return (
        "No compared probe's greedy answer differed; the probes with quality errors "
        f"({errors_text(quality.errors)}) were not compared (compared: {compared})."
    )


def _loaded_clause(quality: QualityResult) -> str:
    """Where the loaded pass ran, as quality.json says (loaded_beside)."""
    if quality.loaded_level is None:
        return ""
    if quality.loaded_beside == "replay":
        return ", and beside a replay of the last level's load"
    return f", and beside level {quality.loaded_level}"


def quality_line(quality: QualityResult) -> tuple[Tone, str]:
    """The headline's line: every comparison's verdict, the worst tone."""
    if not quality.comparisons:
        return "warn", "Quality: probed, but no comparison was made."
    verdicts = ", ".join(f"{c.kind} {verdict_text(c)}" for c in quality.comparisons)
    return worst_tone(quality.comparisons), f"Quality: {verdicts}."


def worst_tone(comparisons: Sequence[QualityComparison]) -> Tone:
    """broken's tone over drift's over within_floor's; plain without comparisons."""
    tones = [VERDICT_TONE[c.verdict] for c in comparisons]
    return min(tones, key=("bad", "warn", "good").index) if tones else "plain"


def verdict_text(comparison: QualityComparison) -> str:
    """'drift (mean |Δlogprob| 0.00286, floor 0.000977)' or 'broken (nan_logprob x1)'."""
    if comparison.verdict == "broken":
        faults = output_faults(comparison.errors)
        return f"broken ({errors_text(faults) if faults else 'no probe compared'})"
    metric = _METRIC[comparison.primary_metric].removesuffix(" (nats)")
    return (
        f"{comparison.verdict} ({metric} {comparison.primary_value:.3g}, "
        f"floor {comparison.floor:.3g})"
    )


def tokens_text(tokens: Sequence[str]) -> str:
    """Tokens joined and quoted, so a leading space or a newline shows."""
    return json.dumps("".join(tokens), ensure_ascii=False)


def _facts(quality: QualityResult) -> list[tuple[str, str]]:
    reference = (
        f"{quality.reference_run} (its 'before' pass; --quality-ref)"
        if quality.reference_run
        else "this run's own 'before' pass (no --quality-ref)"
    )
    if quality.logprobs_available:
        forced = quality.forced_method or (
            f"none ({quality.forced_reason})" if quality.forced_reason else "none"
        )
        logprobs = f"yes; teacher-forced by {forced}"
    else:
        logprobs = f"no: {quality.logprobs_reason or 'the engine gave none'}; greedy agreement only"
    passes = ", ".join(f"{p.name} {p.wall_s:.1f} s" for p in quality.passes)
    loaded = _loaded(quality)
    errors = errors_text(quality.errors)
    return [
        ("reference", reference),
        ("probe set", f"{quality.n_probes} prompts, seed {quality.seed}, {quality.probes_file}"),
        ("probe set sha256", quality.probe_set_digest),
        ("engine dialect", quality.engine),
        ("logprobs", logprobs),
        ("quality errors", errors),
        *([("loaded pass", loaded)] if loaded else []),
        ("probe's time", f"{quality.probe_s:.1f} s ({passes})"),
    ]


def _loaded(quality: QualityResult) -> str | None:
    """Which level the loaded pass ran beside, how, and for what share of its time."""
    if quality.loaded_level is None:
        return None
    how = {
        "level": " (during its measured requests)",
        "replay": " (its load sent again after the sweep, unmeasured)",
        None: "",
    }[quality.loaded_beside]
    share = quality.loaded_overlap_share
    under = f"; {share:.0%} of the pass under that load" if share is not None else ""
    return f"beside level {quality.loaded_level}{how}{under}"


def _verdicts(comparisons: Sequence[QualityComparison]) -> Table:
    rows = [
        [
            c.kind,
            f"{c.reference} vs {c.candidate}",
            _METRIC[c.primary_metric],
            f"{c.primary_value:.3g}",
            f"{c.interval_low:.3g} to {c.interval_high:.3g}",
            f"{c.floor:.3g} ({c.floor_source})",
            c.verdict,
        ]
        for c in comparisons
    ]
    return Table(
        ["comparison", "passes", "primary metric", "value", "95% interval", "floor", "verdict"],
        rows,
        caption="Verdicts",
        tones=[VERDICT_TONE[c.verdict] for c in comparisons],
        right=frozenset({3, 4, 5}),
        bad=frozenset((r, 6) for r, c in enumerate(comparisons) if c.verdict != "within_floor"),
    )


def _metrics(comparisons: Sequence[QualityComparison]) -> Table:
    rows = []
    for c in comparisons:
        m = c.metrics
        rows.append(
            [
                c.kind,
                str(m.probes),
                str(m.forced_tokens),
                _number(m.mean_abs_dlogprob),
                _number(m.p99_abs_dlogprob),
                _share(m.top1_agreement),
                _share(m.exact_match_rate),
                _number(m.median_first_divergence),
            ]
        )
    return Table(
        [
            "comparison",
            "probes",
            "forced tokens",
            "mean |Δlogprob|",
            "p99 |Δlogprob|",
            "top-1 agreement",
            "greedy exact match",
            "median first divergence",
        ],
        rows,
        caption="Metrics (|Δlogprob| in nats per teacher-forced token; - where not measured)",
        right=frozenset(range(1, 8)),
    )


def _diff(comparison: QualityComparison) -> Table:
    rows = [
        [
            entry.probe_id,
            str(entry.position),
            tokens_text(entry.context),
            tokens_text(entry.reference),
            tokens_text(entry.candidate),
            _number(entry.mean_abs_dlogprob),
        ]
        for entry in comparison.diff
    ]
    return Table(
        [
            "probe",
            "first diverging token",
            "before it",
            comparison.reference,
            comparison.candidate,
            "mean |Δlogprob|",
        ],
        rows,
        caption=f"{comparison.kind}: where the worst probes' answers first part "
        f"({comparison.reference} vs {comparison.candidate})",
        right=frozenset({1, 5}),
    )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
