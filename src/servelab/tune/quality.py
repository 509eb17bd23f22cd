"""Only right answers: a study's quality tolerance and the rule that judges each trial.

With `quality: {tolerance: T}` every trial runs the quality probe (bench.quality) and the
default trial's pass is the reference of every other trial's `configuration` comparison.
T is in the unit of that comparison's primary metric: nats of mean |Δlogprob| where the
engine gives logprobs, else a share of probes whose greedy answer differs. The rule,
stated before the tests (docs/TUNE.md "Only right answers"):

1. broken (a quality error in either pass; on the default, any quality error): infeasible.
2. drift beyond the tolerance: the verdict is `drift` and the bootstrap interval's lower
   end exceeds max(T, floor): infeasible. A drift whose lower end is within T is accepted.
3. answers that moved while the scores did not: the primary metric is mean |Δlogprob|,
   the verdict `within_floor`, yet the bootstrap lower end of the share of diverging
   greedy answers exceeds its own floor (the larger of both runs' measured
   self-differences of it, epsilon 0): infeasible. The model scores the default's answers
   as the default does, so its numerics did not move, and still it answers otherwise: it
   emits tokens its model does not rank first, which no tolerance in nats can allow.
4. otherwise accepted.

A trial with no quality.json, or nothing to compare with, is not accepted either: a study
that asks for right answers cannot take one it could not check.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.bench.quality.compare import compare_passes
from servelab.bench.quality.evaluate import BEFORE
from servelab.bench.quality.plan import DEFAULT_PROMPTS, DEFAULT_SEED
from servelab.bench.quality.results import QualityComparison, QualityPass, QualityResult
from servelab.bench.quality.verdict import (
    EPSILON_DIVERGENCE_SHARE,
    bootstrap_interval,
    self_difference,
)
from servelab.tune.results import TrialQuality

__all__ = [
    "MIN_PROMPTS",
    "QUALITY_MET",
    "QUALITY_VIOLATED",
    "QualitySpec",
    "constraint_text",
    "judge_default",
    "judge_trial",
    "not_judged",
]

MIN_PROMPTS = 3
"""The fewest probes whose set holds every length class (bench.quality.probes)."""
QUALITY_MET = -1.0
QUALITY_VIOLATED = 1.0
"""The quality constraint's value for Optuna (<= 0: met): the rule is a yes or a no."""


@dataclass(frozen=True, slots=True)
class QualitySpec:
    """The space file's `quality` block."""

    tolerance: float
    """In the unit of the configuration comparison's primary metric (nats, or a share)."""
    prompts: int = DEFAULT_PROMPTS
    seed: int = DEFAULT_SEED


def constraint_text(spec: QualitySpec) -> str:
    """The quality constraint's name, beside the space's own constraints in study.json."""
    return f"quality within tolerance {spec.tolerance:g} of the default trial"


def judge_default(result: QualityResult | None) -> TrialQuality:
    """The default trial: it is the reference, judged only on quality errors (rule 1)."""
    if result is None:
        return not_judged(None, "the quality probe wrote no quality.json")
    if _before(result) is None:
        notes = "; ".join(result.notes)
        return not_judged(None, f"its before pass did not run{': ' + notes if notes else ''}")
    if result.errors:
        return TrialQuality(
            reference_trial=None,
            verdict="broken",
            errors=result.errors,
            accepted=False,
            reason=f"quality broken: {_kinds(result.errors)} (the reference pass itself)",
        )
    return TrialQuality(
        reference_trial=None,
        accepted=True,
        reason="the reference: every other trial's answers are compared with this one's",
    )


def judge_trial(
    result: QualityResult | None,
    reference: QualityResult | None,
    *,
    tolerance: float,
    reference_trial: int,
) -> TrialQuality:
    """A trial's configuration comparison against the default trial's pass, by the rule
    of the module's docstring; `reference` is the default trial's quality.json."""
    if result is None:
        return not_judged(reference_trial, "the quality probe wrote no quality.json")
    if reference is None:
        return not_judged(reference_trial, f"trial {reference_trial} has no quality.json")
    comparison = next((c for c in result.comparisons if c.kind == "configuration"), None)
    if comparison is None:
        return not_judged(
            reference_trial, f"its answers were not compared with trial {reference_trial}'s"
        )
    against = f"against trial {reference_trial}"
    numbers = _numbers(comparison)
    accepted, reason = True, f"within tolerance {tolerance:g} {against}: {numbers}"
    if comparison.verdict == "broken":
        accepted, reason = False, f"quality broken {against}: {_kinds(comparison.errors)}"
    elif comparison.verdict == "drift" and comparison.interval_low > max(
        tolerance, comparison.floor
    ):
        accepted = False
        reason = f"quality drift beyond tolerance {tolerance:g} {against}: {numbers}"
    elif comparison.primary_metric == "mean_abs_dlogprob" and comparison.verdict == "within_floor":
        moved = _answers_moved(result, reference, comparison)
        if moved is not None:
            accepted = False
            reason = (
                f"greedy answers drift {against}: {moved}; its logprobs stay within the "
                f"floor: {numbers}"
            )
    return TrialQuality(
        reference_trial=reference_trial,
        verdict=comparison.verdict,
        primary_metric=comparison.primary_metric,
        primary_value=comparison.primary_value,
        interval_low=comparison.interval_low,
        floor=comparison.floor,
        divergence_share=comparison.metrics.divergence_share,
        errors=comparison.errors,
        accepted=accepted,
        reason=reason,
    )


def _answers_moved(
    result: QualityResult, reference: QualityResult, comparison: QualityComparison
) -> str | None:
    """Rule 3: the greedy answers' divergence, bootstrapped as the verdict bootstraps its
    metric, against its own floor; None where it stays within it."""
    mine, theirs = _before(result), _before(reference)
    if mine is None or theirs is None:
        return None
    pairs = compare_passes(theirs, mine, reference_set=BEFORE, candidate_set=comparison.reference)
    low, _ = bootstrap_interval(pairs, "divergence_share")
    floors = [
        self_difference(_determinism(run)).get("divergence_share", 0.0)
        for run in (result, reference)
    ]
    floor = max(EPSILON_DIVERGENCE_SHARE, *floors)
    if not low > floor:
        return None
    share = pairs.metrics.divergence_share
    return (
        f"{round(share * pairs.metrics.probes)} of {pairs.metrics.probes} probes answer "
        f"otherwise (divergence_share {share:.3g}, lower end {low:.3g} over its floor "
        f"{floor:.3g}): tokens its model does not rank first"
    )


def _numbers(comparison: QualityComparison) -> str:
    unit = " nats" if comparison.primary_metric == "mean_abs_dlogprob" else ""
    return (
        f"{comparison.primary_metric} {comparison.primary_value:.3g}{unit} (lower end "
        f"{comparison.interval_low:.3g}, floor {comparison.floor:.3g})"
    )


def _before(result: QualityResult) -> QualityPass | None:
    return next((p for p in result.passes if p.name == BEFORE), None)


def _determinism(result: QualityResult) -> QualityComparison | None:
    return next((c for c in result.comparisons if c.kind == "determinism"), None)


def _kinds(errors: dict[str, int]) -> str:
    return ", ".join(f"{kind} x{count}" for kind, count in sorted(errors.items()))


def not_judged(reference_trial: int | None, why: str) -> TrialQuality:
    """A trial whose answers could not be checked: never accepted."""
    return TrialQuality(
        reference_trial=reference_trial,
        accepted=False,
        reason=f"quality not judged: {why}",
    )
