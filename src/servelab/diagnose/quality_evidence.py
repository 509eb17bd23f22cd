"""The quality probe's comparisons as evidence and as words, for the rules that cite them.

A comparison (quality.json, docs/QUALITY.md) carries its own primary metric, bootstrap
interval, floor and verdict; the rules add no threshold of their own and only say what
the probe measured: how far the outputs moved and whether that is beyond the floor.
"""

from __future__ import annotations

from servelab.bench.quality.results import (
    PrimaryMetric,
    QualityComparison,
    errors_text,
    output_faults,
)
from servelab.diagnose.findings import Evidence

__all__ = ["comparison_evidence", "comparison_source", "measured", "moved"]

_LABEL: dict[PrimaryMetric, str] = {
    "mean_abs_dlogprob": "mean |Δlogprob|",
    "divergence_share": "share of probes whose answer diverged",
}
_UNIT: dict[PrimaryMetric, str] = {"mean_abs_dlogprob": "nats", "divergence_share": "share"}


def comparison_source(comparison: QualityComparison) -> str:
    """Where a comparison's numbers are read: 'quality.json determinism (before vs after)'."""
    return f"quality.json {comparison.kind} ({comparison.reference} vs {comparison.candidate})"


def measured(comparison: QualityComparison) -> str:
    """'mean |Δlogprob| 0.0123 nats (95% 0.0101-0.015) against a floor of 0.000977 (epsilon)'."""
    metric = comparison.primary_metric
    unit = " nats" if metric == "mean_abs_dlogprob" else ""
    if comparison.answers_moved_alone:
        return (
            f"{comparison.primary_value:.3g} nats of teacher-forced scores (within the floor) "
            f"while the greedy answers moved: a diverging share whose 95% lower end "
            f"{comparison.divergence_interval_low:.3g} exceeds its floor of "
            f"{comparison.divergence_floor:.3g}"
        )
    return (
        f"{_LABEL[metric]} {comparison.primary_value:.3g}{unit} "
        f"(95% {comparison.interval_low:.3g}-{comparison.interval_high:.3g}) against a floor "
        f"of {comparison.floor:.3g} ({comparison.floor_source})"
    )


def moved(comparison: QualityComparison) -> str:
    """The comparison's verdict as a clause: how far the outputs moved, or that they broke."""
    if comparison.verdict == "broken":
        faults = output_faults(comparison.errors)
        if not faults:
            return f"nothing could be compared ({comparison.reason}): broken"
        return f"the outputs broke ({errors_text(faults)}): broken"
    if comparison.verdict == "drift":
        return f"the outputs moved by {measured(comparison)}: drift"
    return f"the outputs did not move beyond the floor ({measured(comparison)}): within_floor"


def comparison_evidence(comparison: QualityComparison) -> list[Evidence]:
    """The primary metric, its interval and floor, the greedy agreement, the first diff."""
    source = comparison_source(comparison)
    metric = comparison.primary_metric
    m = comparison.metrics
    evidence = [
        Evidence(
            what=f"{_LABEL[metric]} ({comparison.verdict})",
            value=round(comparison.primary_value, 6),
            unit=_UNIT[metric],
            source=source,
        ),
        Evidence(
            what="bootstrap interval over the probes (2.5th-97.5th percentile)",
            value=f"{comparison.interval_low:.3g}-{comparison.interval_high:.3g}",
            unit=_UNIT[metric],
            source=source,
        ),
        Evidence(
            what=f"floor ({comparison.floor_source})",
            value=round(comparison.floor, 6),
            unit=_UNIT[metric],
            source=source,
        ),
        Evidence(
            what=f"greedy answers identical, of {m.probes} probes",
            value=round(m.exact_match_rate, 4),
            unit="share",
            source=source,
        ),
    ]
    if m.median_first_divergence is not None:
        evidence.append(
            Evidence(
                what="median position of the first diverging token",
                value=m.median_first_divergence,
                unit="tokens",
                source=source,
            )
        )
    if comparison.diff:
        first = comparison.diff[0]
        evidence.append(
            Evidence(
                what=f"first divergence of {first.probe_id} at token {first.position}",
                value=f"{''.join(first.reference)!r} -> {''.join(first.candidate)!r}",
                source=source,
            )
        )
    return evidence
