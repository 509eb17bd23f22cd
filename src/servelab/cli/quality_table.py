"""The short Quality table `bench` and `run` print after the sweep (pure: no console)."""

from __future__ import annotations

from rich.table import Table

from servelab.bench.quality.results import QualityResult, errors_text, request_failures

__all__ = ["quality_lines", "render_quality"]


def render_quality(result: QualityResult) -> Table:
    """One row per comparison: its verdict, the metric that decided it, and the floor."""
    table = Table(title="Quality", title_justify="left")
    for column in ("comparison", "verdict", "primary metric", "value", "floor", "exact match"):
        table.add_column(column, justify="left" if column[0] in "cvp" else "right")
    for c in result.comparisons:
        table.add_row(
            f"{c.kind} ({c.reference} vs {c.candidate})",
            c.verdict,
            c.primary_metric,
            f"{c.primary_value:.3g}",
            f"{c.floor:.3g} ({c.floor_source})",
            f"{c.metrics.exact_match_rate:.0%}",
        )
    return table


def quality_lines(result: QualityResult) -> list[str]:
    """What the table leaves out: errors by kind, logprobs, the loaded pass, the time."""
    lines = []
    for c in result.comparisons:
        if c.answers_moved_alone:
            lines.append(
                f"{c.kind}: drift of the greedy answers alone: {c.metrics.divergence_share:.0%} "
                "diverge while the teacher-forced logprobs stay within the floor, a decode "
                "path or sampler that scoring the reference's tokens cannot see "
                "(quality.json's diff shows where)"
            )
    if result.errors:
        failed = request_failures(result.errors)
        left = (
            f" (request failures, their probes left out: {errors_text(failed)})" if failed else ""
        )
        lines.append(f"quality errors: {errors_text(result.errors)}{left}")
    if result.logprobs_available:
        forced = result.forced_method or _none(result.forced_reason)
        lines.append(f"logprobs: available (teacher-forced by {forced})")
    else:
        lines.append(f"logprobs: not available ({result.logprobs_reason or 'no reason given'})")
    if result.loaded_level is not None:
        how = "beside" if result.loaded_beside == "level" else "beside a replay of"
        overlap = result.loaded_overlap_share
        under = f", {overlap:.0%} of it under load" if overlap is not None else ""
        lines.append(f"loaded pass: {how} level {result.loaded_level}{under}")
    lines.extend(f"quality: {note}" for note in result.notes)
    lines.append(f"probe time: {result.probe_s:.1f} s ({result.n_probes} probes)")
    return lines


def _none(reason: str | None) -> str:
    """'none', with why teacher forcing was off where quality.json says."""
    return f"none: {reason}" if reason else "none"
