"""Only right answers: a study's quality tolerance and the rule that judges each trial.

With `quality: {tolerance: T}` every trial runs the quality probe (bench.quality) and the
default trial's pass is the reference of every other trial's `configuration` comparison.
T is in the unit of that comparison's primary metric: nats of mean |Δlogprob| where the
engine gives logprobs, else a share of probes whose greedy answer differs. The library's
verdict (bench.quality.verdict) decides what moved; this rule only adds the tolerance
(docs/TUNE.md "Only right answers"):

1. broken: an output fault (bench.quality.results.OUTPUT_FAULTS, not_greedy included) in
   any of the trial's passes, not only the configuration comparison's (on the default, in
   any of its passes), or a configuration comparison the library judged broken (the
   default's own faults, or request failures that left no probe to compare): infeasible.
   Request failures (http, transport, malformed) alone are not: their probes are left out
   of the comparison and named in the reason.
2. drift of the greedy answers alone (`answers_moved_alone`: divergence_share moved
   while the primary, mean |Δlogprob|, stayed within its floor): infeasible whatever T.
   The trial scores the default's answers as the default does, so its numerics did not
   move, and still it answers otherwise (a decode path or a sampler): T, in nats of those
   scores, cannot allow it.
3. drift of the primary metric beyond the tolerance: its bootstrap lower end exceeds
   max(T, floor): infeasible. A drift whose lower end is within T is accepted, greedy
   answers that moved with it included: numerics allowed to move flip near-ties.
4. otherwise accepted.

A trial with no quality.json, or nothing to compare with, is not accepted either: a study
that asks for right answers cannot take one it could not check.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.bench.quality.evaluate import BEFORE
from servelab.bench.quality.plan import DEFAULT_PROMPTS, DEFAULT_SEED
from servelab.bench.quality.results import (
    QualityComparison,
    QualityPass,
    QualityResult,
    errors_text,
    output_faults,
    request_failures,
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
    faults = output_faults(result.errors)
    if faults:
        names = _faulty(result)
        where = (
            "the reference pass itself"
            if names == [BEFORE]
            else f"the reference trial's {_passes(names)}"
        )
        return TrialQuality(
            reference_trial=None,
            verdict="broken",
            errors=result.errors,
            accepted=False,
            reason=f"quality broken: {errors_text(faults)} ({where})",
        )
    before = _before(result)
    if before is not None and before.readings and not any(r.ok for r in before.readings):
        return not_judged(
            None,
            "every request of its before pass failed "
            f"({errors_text(request_failures(before.errors))})",
        )
    return TrialQuality(
        reference_trial=None,
        errors=result.errors,
        accepted=True,
        reason="the reference: every other trial's answers are compared with this one's"
        + _failed(result, before),
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
    own = output_faults(result.errors)
    theirs = output_faults(comparison.errors)
    broken = bool(own) or comparison.verdict == "broken"
    if own:
        accepted = False
        reason = f"quality broken {against}: {errors_text(own)} (its {_passes(_faulty(result))})"
    elif comparison.verdict == "broken" and theirs:
        accepted = False
        reason = (
            f"quality broken {against}: {errors_text(theirs)} in trial {reference_trial}'s "
            "pass, the reference"
        )
    elif comparison.verdict == "broken":
        accepted, reason = False, f"quality broken {against}: {comparison.reason}"
    elif comparison.answers_moved_alone:
        accepted = False
        reason = (
            f"greedy answers drift {against}: {_answers_moved(comparison)}; its logprobs "
            f"stay within the floor: {numbers}"
        )
    elif comparison.verdict == "drift" and comparison.interval_low > max(
        tolerance, comparison.floor
    ):
        accepted = False
        reason = f"quality drift beyond tolerance {tolerance:g} {against}: {numbers}"
    if not broken:
        reason += _failed(result, _before(result))
    return TrialQuality(
        reference_trial=reference_trial,
        verdict="broken" if broken else comparison.verdict,
        primary_metric=comparison.primary_metric,
        primary_value=comparison.primary_value,
        interval_low=comparison.interval_low,
        floor=comparison.floor,
        divergence_share=comparison.metrics.divergence_share,
        moved=[] if broken else comparison.moved,
        errors=result.errors,
        accepted=accepted,
        reason=reason,
    )


def _answers_moved(comparison: QualityComparison) -> str:
    """Rule 2's numbers: how many greedy answers differ, against their own floor."""
    m = comparison.metrics
    return (
        f"{round(m.divergence_share * m.probes)} of {m.probes} probes answer otherwise "
        f"(divergence_share {m.divergence_share:.3g}, lower end "
        f"{comparison.divergence_interval_low or 0:.3g} over its floor "
        f"{comparison.divergence_floor or 0:.3g}): a decode path or sampler"
    )


def _numbers(comparison: QualityComparison) -> str:
    unit = " nats" if comparison.primary_metric == "mean_abs_dlogprob" else ""
    return (
        f"{comparison.primary_metric} {comparison.primary_value:.3g}{unit} (lower end "
        f"{comparison.interval_low:.3g}, floor {comparison.floor:.3g})"
    )


def _before(result: QualityResult) -> QualityPass | None:
    return next((p for p in result.passes if p.name == BEFORE), None)


def _faulty(result: QualityResult) -> list[str]:
    """The passes of `result` that hold an output fault."""
    return [p.name for p in result.passes if output_faults(p.errors)]


def _passes(names: list[str]) -> str:
    return f"{', '.join(names)} pass{'es' if len(names) > 1 else ''}"


def _failed(result: QualityResult, before: QualityPass | None) -> str:
    """'; 2 of 32 probes' requests failed in its passes (http x2): left out of the
    comparisons', or '' where none failed."""
    failures = request_failures(result.errors)
    if not failures:
        return ""
    failed = {r.probe_id for p in result.passes for r in p.readings if not r.ok}
    failed |= {r.probe_id for p in result.passes for f in p.forced for r in f.readings if not r.ok}
    total = len(before.readings) if before is not None else result.n_probes
    return (
        f"; {len(failed)} of {total} probes' requests failed in its passes "
        f"({errors_text(failures)}): left out of the comparisons"
    )


def not_judged(reference_trial: int | None, why: str) -> TrialQuality:
    """A trial whose answers could not be checked: never accepted."""
    return TrialQuality(
        reference_trial=reference_trial,
        accepted=False,
        reason=f"quality not judged: {why}",
    )
