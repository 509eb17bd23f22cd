"""From a run's passes (and a reference run's result) to quality.json's document.

The comparisons made are those the passes allow: determinism needs 'before' and 'after',
batch invariance 'before' and 'loaded', configuration 'before' here and in the reference
run (whose continuations this run's 'before' must have scored, under
`reference_label(run)`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from servelab.bench.quality.compare import compare_passes
from servelab.bench.quality.probes import Probe, probe_set_digest
from servelab.bench.quality.results import (
    EngineName,
    ForcedMethod,
    QualityComparison,
    QualityPass,
    QualityResult,
)
from servelab.bench.quality.verdict import judge, self_difference
from servelab.core.errors import ConfigError

__all__ = ["BEFORE", "evaluate_quality", "reference_label"]

BEFORE = "before"
"""The pass every comparison is made against: alone, before the sweep."""


def reference_label(run: str) -> str:
    """The forced-set label under which this run scores a reference run's 'before'."""
    return f"{run}:{BEFORE}"


def evaluate_quality(
    *,
    probes: Sequence[Probe],
    seed: int,
    engine: EngineName,
    passes: Sequence[QualityPass],
    logprobs_available: bool,
    logprobs_reason: str | None = None,
    forced_method: ForcedMethod | None = None,
    forced_reason: str | None = None,
    reference: QualityResult | None = None,
    reference_run: str | None = None,
) -> QualityResult:
    """Compare the passes, judge each comparison, and gather the result.

    `reference` is the reference run's quality.json (`--quality-ref RUN`, loaded by the
    caller) and `reference_run` its name; a ConfigError when its probe set differs.
    """
    digest = probe_set_digest(list(probes))
    if reference is not None and reference.probe_set_digest != digest:
        raise ConfigError(
            f"the reference run {reference_run or ''} probed another probe set",
            hint="run with the same --quality-prompts and seed, or replay its quality_probes.jsonl",
        )
    by_name = {p.name: p for p in passes}
    before = by_name.get(BEFORE)
    comparisons: list[QualityComparison] = []
    determinism: QualityComparison | None = None
    if before is not None and "after" in by_name:
        determinism = judge(
            compare_passes(before, by_name["after"]),
            kind="determinism",
            reference=BEFORE,
            candidate="after",
        )
        comparisons.append(determinism)
    mine = self_difference(determinism)
    if before is not None and "loaded" in by_name:
        comparisons.append(
            judge(
                compare_passes(before, by_name["loaded"]),
                kind="batch_invariance",
                reference=BEFORE,
                candidate="loaded",
                self_differences=[mine],
            )
        )
    if before is not None and reference is not None:
        theirs = next((p for p in reference.passes if p.name == BEFORE), None)
        if theirs is not None:
            label = reference_label(reference_run or "reference")
            ref_determinism = next(
                (c for c in reference.comparisons if c.kind == "determinism"), None
            )
            comparisons.append(
                judge(
                    compare_passes(theirs, before, reference_set=BEFORE, candidate_set=label),
                    kind="configuration",
                    reference=label,
                    candidate=BEFORE,
                    self_differences=[mine, self_difference(ref_determinism)],
                )
            )
    errors: Counter[str] = Counter()
    for run in passes:
        errors.update(run.errors)
    return QualityResult(
        probe_set_digest=digest,
        seed=seed,
        n_probes=len(probes),
        engine=engine,
        logprobs_available=logprobs_available,
        logprobs_reason=logprobs_reason,
        forced_method=forced_method,
        forced_reason=forced_reason if forced_method is None else None,
        reference_run=reference_run,
        passes=list(passes),
        comparisons=comparisons,
        errors=dict(sorted(errors.items())),
        probe_s=sum(p.wall_s for p in passes),
    )
