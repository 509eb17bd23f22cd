"""A readable diff: where the worst probes' greedy continuations first part ways.

Data only (DiffEntry); report/ renders it. "Worst" is the largest mean forced |Δlogprob|
where there is one (the probe the engines disagree on most), then the earliest
divergence (the answer that changed soonest).
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.quality.compare import ProbePair
from servelab.bench.quality.results import DiffEntry

__all__ = ["DIFF_CONTEXT_TOKENS", "DIFF_PROBES", "DIFF_SPAN_TOKENS", "first_divergences"]

DIFF_PROBES = 5
"""Probes shown: enough to see whether the divergences share a pattern."""
DIFF_CONTEXT_TOKENS = 4
"""Shared tokens shown before the first difference."""
DIFF_SPAN_TOKENS = 8
"""Tokens shown of each side from the first difference on."""


def first_divergences(
    pairs: Sequence[ProbePair],
    *,
    probes: int = DIFF_PROBES,
    context: int = DIFF_CONTEXT_TOKENS,
    span: int = DIFF_SPAN_TOKENS,
) -> list[DiffEntry]:
    """The first divergence of each of the `probes` worst diverging probes."""
    diverged = [p for p in pairs if p.diverged]
    diverged.sort(key=lambda p: (-_mean(p), p.first_divergence, p.probe_id))
    entries: list[DiffEntry] = []
    for pair in diverged[:probes]:
        at = pair.first_divergence
        entries.append(
            DiffEntry(
                probe_id=pair.probe_id,
                position=at,
                context=pair.reference_tokens[max(at - context, 0) : at],
                reference=pair.reference_tokens[at : at + span],
                candidate=pair.candidate_tokens[at : at + span],
                mean_abs_dlogprob=_mean(pair) if pair.abs_dlogprobs.size else None,
            )
        )
    return entries


def _mean(pair: ProbePair) -> float:
    return float(pair.abs_dlogprobs.mean()) if pair.abs_dlogprobs.size else 0.0
