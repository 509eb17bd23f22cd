"""Two passes on the same probe set, reduced probe by probe and then to metrics.

Per probe it keeps what the bootstrap resamples (verdict.py): the |Δlogprob| of each
teacher-forced token, whether the greedy continuations differ, and where. The metrics
are defined in docs/QUALITY.md "Metrics"; a probe with a quality error on either side is
left out of them: an output fault makes the verdict `broken` anyway, and a probe whose
request failed (http, transport, malformed) is named in `left_out`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servelab.bench.quality.results import (
    ForcedReading,
    PrimaryMetric,
    ProbeReading,
    QualityMetrics,
    QualityPass,
)

__all__ = ["PairComparison", "ProbePair", "compare_passes", "metric_value", "metrics_of"]


@dataclass(frozen=True, slots=True)
class ProbePair:
    """One probe, both passes answered without a quality error."""

    probe_id: str
    abs_dlogprobs: np.ndarray
    """|candidate - reference| per teacher-forced token, in nats; empty without them."""
    top1: list[bool] | None
    """Per forced token: the candidate's own most likely token is the reference's."""
    diverged: bool
    first_divergence: int
    """Index of the first differing token; the length where they never differ."""
    matches: int | None
    """Positions holding the same token; None when the two sides' tokens don't compare."""
    positions: int
    """The longer continuation's length."""
    reference_tokens: list[str]
    candidate_tokens: list[str]


@dataclass(frozen=True, slots=True)
class PairComparison:
    """Two passes compared: the per-probe pairs, their metrics and the passes' errors."""

    pairs: list[ProbePair]
    metrics: QualityMetrics
    errors: dict[str, int]
    left_out: dict[str, str | None] = field(default_factory=dict)
    """Probes of the reference without a pair, each with the quality error that left it
    out (either side's; None where the candidate has no reading of it)."""

    @property
    def primary_metric(self) -> PrimaryMetric:
        """|Δlogprob| where forced logprobs were compared, else divergence share."""
        return "mean_abs_dlogprob" if self.metrics.forced_tokens else "divergence_share"


def compare_passes(
    reference: QualityPass,
    candidate: QualityPass,
    *,
    reference_set: str | None = None,
    candidate_set: str | None = None,
) -> PairComparison:
    """Compare `candidate` with `reference`, probe by probe.

    The forced readings compared are the reference's set `reference_set` and the
    candidate's set `candidate_set`, both scoring the same continuations; both default to
    the reference pass's name (the reference scored its own continuations, the candidate
    scored the reference's).
    """
    ref_label = reference_set or reference.name
    cand_label = candidate_set or reference.name
    ref_forced = _forced(reference, ref_label)
    cand_forced = _forced(candidate, cand_label)
    by_id = {r.probe_id: r for r in candidate.readings}
    pairs: list[ProbePair] = []
    left_out: dict[str, str | None] = {}
    for ref in reference.readings:
        cand = by_id.get(ref.probe_id)
        a, b = ref_forced.get(ref.probe_id), cand_forced.get(ref.probe_id)
        bad = [r for r in (ref, cand, a, b) if r is not None and not r.ok]
        if cand is None or bad:
            left_out[ref.probe_id] = next((r.error_kind for r in bad if r.error_kind), None)
            continue
        pairs.append(_pair(ref, cand, a, b))
    errors = Counter(reference.errors)
    errors.update(candidate.errors)
    return PairComparison(pairs, metrics_of(pairs), dict(sorted(errors.items())), left_out)


def metrics_of(pairs: Sequence[ProbePair]) -> QualityMetrics:
    """Every metric of docs/QUALITY.md over `pairs`."""
    deltas = np.concatenate([p.abs_dlogprobs for p in pairs]) if pairs else np.empty(0)
    tops = [t for p in pairs if p.top1 is not None for t in p.top1]
    comparable = [p for p in pairs if p.matches is not None]
    total = sum(p.positions for p in comparable)
    diverged = sum(p.diverged for p in pairs)
    n = len(pairs)
    return QualityMetrics(
        probes=n,
        forced_tokens=int(deltas.size),
        mean_abs_dlogprob=float(deltas.mean()) if deltas.size else None,
        p99_abs_dlogprob=float(np.percentile(deltas, 99)) if deltas.size else None,
        top1_agreement=sum(tops) / len(tops) if tops else None,
        positional_agreement=(sum(p.matches or 0 for p in comparable) / total if total else None),
        exact_match_rate=(n - diverged) / n if n else 1.0,
        divergence_share=diverged / n if n else 0.0,
        median_first_divergence=(
            float(np.median([p.first_divergence for p in pairs])) if pairs else None
        ),
    )


def metric_value(pairs: Sequence[ProbePair], metric: PrimaryMetric) -> float:
    """One primary metric over `pairs`, fast enough to run per bootstrap resample."""
    if metric == "mean_abs_dlogprob":
        count = sum(p.abs_dlogprobs.size for p in pairs)
        return float(sum(p.abs_dlogprobs.sum() for p in pairs) / count) if count else 0.0
    return sum(p.diverged for p in pairs) / len(pairs) if pairs else 0.0


def _forced(run: QualityPass, label: str) -> dict[str, ForcedReading]:
    for forced_set in run.forced:
        if forced_set.on == label:
            return {r.probe_id: r for r in forced_set.readings}
    return {}


def _pair(
    ref: ProbeReading,
    cand: ProbeReading,
    ref_forced: ForcedReading | None,
    cand_forced: ForcedReading | None,
) -> ProbePair:
    deltas = np.empty(0)
    top1: list[bool] | None = None
    if (
        ref_forced is not None
        and cand_forced is not None
        and ref_forced.logprobs
        and len(ref_forced.logprobs) == len(cand_forced.logprobs)
    ):
        deltas = np.abs(np.subtract(cand_forced.logprobs, ref_forced.logprobs))
        top1 = cand_forced.top1
    a, b, exact = _sequences(ref, cand)
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    same = a == b if exact else ref.text == cand.text
    if first is None:
        first = len(a) if same else min(len(a), len(b))
    positions = max(len(a), len(b))
    matches = sum(x == y for x, y in zip(a, b, strict=False)) if exact else None
    return ProbePair(
        probe_id=ref.probe_id,
        abs_dlogprobs=deltas,
        top1=top1,
        diverged=not same,
        first_divergence=first,
        matches=matches,
        positions=positions,
        reference_tokens=_shown(ref),
        candidate_tokens=_shown(cand),
    )


def _sequences(ref: ProbeReading, cand: ProbeReading) -> tuple[list[object], list[object], bool]:
    """The two token sequences to compare, and whether they are tokens (True) or only the
    streamed chunks, which decide nothing but where a differing text first differs."""
    if ref.token_ids is not None and cand.token_ids is not None:
        return list(ref.token_ids), list(cand.token_ids), True
    if ref.token_source == cand.token_source == "logprobs":
        return list(ref.tokens), list(cand.tokens), True
    return list(ref.tokens), list(cand.tokens), False


def _shown(reading: ProbeReading) -> list[str]:
    """Tokens as text for the diff; an id with no text of its own shows as <id:N>."""
    if reading.token_ids is None:
        return list(reading.tokens)
    pieces = reading.tokens if len(reading.tokens) == len(reading.token_ids) else []
    return [
        (pieces[i] if pieces and pieces[i] else f"<id:{token}>")
        for i, token in enumerate(reading.token_ids)
    ]
