"""The floor and the verdict of one comparison.

The rule, fixed before any test was written (docs/QUALITY.md "Verdicts"):

1. `broken` when either pass has an output fault (results.OUTPUT_FAULTS: nan_logprob,
   not_greedy, reasoning_only, no_finish_reason, short_stream); the reason names the
   kinds. A request failure (http, transport, malformed: no answer came) is not a broken
   answer: its probe is left out of the pairs, and the reason counts and names it; the
   comparison is `broken` only when request failures left no probe to compare.
2. Else the primary metric's floor is the larger of its epsilon (below) and the measured
   self-difference: the determinism comparison's value of the same metric (this run's,
   and the reference run's too for a configuration comparison). The determinism
   comparison itself is floored by the epsilon alone: it is the self-difference.
3. The probes are resampled with replacement BOOTSTRAP_RESAMPLES times and the metric
   recomputed on each; `drift` when the 2.5th percentile of those values (the lower end
   of a one-sided 97.5% interval) exceeds the floor. Put as a factor: the value must
   exceed the floor by value / lower end, a factor the bootstrap derives from how the
   difference is spread over the probes (one probe that moves a lot gives a wide interval
   and a large factor; all probes moving a little give a narrow one).
4. Where the primary is mean |Δlogprob|, also `drift` when divergence_share's lower end,
   from the same resamples, exceeds its own floor (step 2's, for that metric). Teacher
   forcing scores the reference's tokens through the prompt, so a decode-only kernel or a
   sampler fault moves the greedy answers and leaves every forced logprob as it was; this
   is the route that sees it. `moved` names the metrics past their floor.
5. Else `within_floor`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np

from servelab.bench.quality.compare import PairComparison, metric_value
from servelab.bench.quality.diff import first_divergences
from servelab.bench.quality.results import (
    REQUEST_FAILURES,
    ComparisonKind,
    PrimaryMetric,
    QualityComparison,
    Verdict,
    errors_text,
    output_faults,
    request_failures,
)

__all__ = [
    "BOOTSTRAP_QUANTILE",
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "EPSILONS",
    "EPSILON_DIVERGENCE_SHARE",
    "EPSILON_MEAN_ABS_DLOGPROB_NATS",
    "bootstrap_interval",
    "judge",
    "self_difference",
]

EPSILON_MEAN_ABS_DLOGPROB_NATS = 2.0**-10
"""≈ 0.00098 nats. bf16 keeps 8 significant bits, so one rounding moves a value by up to
2^-9 of itself (its unit roundoff): a logprob of order one nat that any step computes in
bf16 where the reference kept float32, or rounds in bf16 in another order, moves by about
2^-9. float32's unit roundoff is 2^-24; a reduction over ~2^12 terms (a hidden size)
summed in another order errs by about its square root times that, 2^-18. The epsilon sits
between the two, a factor 2 under the smallest change a bf16 rounding makes and 2^8 over
what float32 reordering makes: below it, nothing but float32 noise could have moved."""
EPSILON_DIVERGENCE_SHARE = 0.0
"""Greedy decoding under the same numerics is reproducible bit for bit, so no share of
diverging probes is noise by itself; run-to-run noise enters through the measured
self-difference, and the bootstrap's lower end keeps a lone near-tie (a probe whose top
two tokens lie within a rounding) from calling drift: with 32 probes it takes about four
diverging ones for the lower end to leave zero."""
EPSILONS: dict[PrimaryMetric, float] = {
    "mean_abs_dlogprob": EPSILON_MEAN_ABS_DLOGPROB_NATS,
    "divergence_share": EPSILON_DIVERGENCE_SHARE,
}
BOOTSTRAP_RESAMPLES = 2000
"""Resamples of the probe set: the 2.5th percentile moves by well under a percent of the
interval between repeats at this count."""
BOOTSTRAP_QUANTILE = 0.025
"""The lower end is this quantile of the resampled values (one-sided 97.5%)."""
BOOTSTRAP_SEED = 0
"""Fixed, so the same passes always get the same verdict."""


def judge(
    comparison: PairComparison,
    *,
    kind: ComparisonKind,
    reference: str,
    candidate: str,
    self_differences: Iterable[Mapping[PrimaryMetric, float]] = (),
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> QualityComparison:
    """The comparison's verdict by the module's rule; `self_differences` are the
    determinism values that raise the floors (none for the determinism comparison)."""
    measured = list(self_differences)
    metric = comparison.primary_metric
    value = metric_value(comparison.pairs, metric)
    low, high = bootstrap_interval(comparison, metric, resamples=resamples, seed=seed)
    floor, source = _floor(metric, measured)
    numbers = (
        f"{metric} {value:.3g} (bootstrap lower end {low:.3g}) against floor {floor:.3g} ({source})"
    )
    moved: list[PrimaryMetric] = [metric] if low > floor else []
    share_low: float | None = None
    share_floor: float | None = None
    share = ""
    if metric == "mean_abs_dlogprob":
        share_low, _ = bootstrap_interval(
            comparison, "divergence_share", resamples=resamples, seed=seed
        )
        share_floor, _ = _floor("divergence_share", measured)
        share = (
            f"divergence_share {comparison.metrics.divergence_share:.3g} (bootstrap lower "
            f"end {share_low:.3g}) against floor {share_floor:.3g}"
        )
        if share_low > share_floor:
            moved.append("divergence_share")
    verdict: Verdict
    faults = output_faults(comparison.errors)
    failures = request_failures(comparison.errors)
    failed = sorted(i for i, kind in comparison.left_out.items() if kind in REQUEST_FAILURES)
    left = ""
    if failed:
        probes = f"{len(failed)} probe{'s' if len(failed) > 1 else ''}"
        left = f"; {probes} left out for request failures ({errors_text(failures)})"
    elif failures:
        left = (
            f"; request failures in readings this comparison does not use ({errors_text(failures)})"
        )
    if faults:
        verdict, reason, moved = "broken", f"quality errors: {errors_text(faults)}{left}", []
    elif failures and not comparison.pairs:
        verdict, moved = "broken", []
        reason = f"request failures left no probe to compare: {errors_text(failures)}"
    elif moved and metric not in moved:
        verdict = "drift"
        reason = (
            "greedy answers moved while teacher-forced scores did not: decode path or "
            f"sampler; {share}; {numbers}: within the floor"
        )
    elif moved:
        factor = f", {low / floor:.3g}x the floor" if floor > 0 else ""
        also = f"; greedy answers moved too: {share}" if len(moved) > 1 else ""
        verdict, reason = "drift", f"{numbers}: the lower end exceeds the floor{factor}{also}"
    else:
        verdict, reason = "within_floor", f"{numbers}: the lower end is within the floor"
    if verdict != "broken":
        reason += left
    return QualityComparison(
        kind=kind,
        reference=reference,
        candidate=candidate,
        metrics=comparison.metrics,
        primary_metric=metric,
        primary_value=value,
        interval_low=low,
        interval_high=high,
        floor=floor,
        floor_source=source,
        verdict=verdict,
        reason=reason,
        moved=moved,
        divergence_interval_low=share_low,
        divergence_floor=share_floor,
        errors=comparison.errors,
        left_out=list(comparison.left_out),  # every probe left out, in probe-set order
        diff=first_divergences(comparison.pairs),
    )


def _floor(
    metric: PrimaryMetric, measured: Iterable[Mapping[PrimaryMetric, float]]
) -> tuple[float, Literal["measured", "epsilon"]]:
    """The larger of the metric's epsilon and its measured self-differences, and which."""
    epsilon = EPSILONS[metric]
    worst = max((d[metric] for d in measured if metric in d), default=None)
    if worst is not None and worst > epsilon:
        return worst, "measured"
    return epsilon, "epsilon"


def self_difference(determinism: QualityComparison | None) -> dict[PrimaryMetric, float]:
    """A determinism comparison's values of each primary metric it measured."""
    if determinism is None:
        return {}
    values: dict[PrimaryMetric, float] = {"divergence_share": determinism.metrics.divergence_share}
    if determinism.metrics.mean_abs_dlogprob is not None:
        values["mean_abs_dlogprob"] = determinism.metrics.mean_abs_dlogprob
    return values


def bootstrap_interval(
    comparison: PairComparison,
    metric: PrimaryMetric,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """(2.5th, 97.5th) percentiles of `metric` over probe sets resampled with replacement."""
    pairs = comparison.pairs
    if not pairs:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
    if metric == "mean_abs_dlogprob":
        sums = np.array([p.abs_dlogprobs.sum() for p in pairs])
        counts = np.array([p.abs_dlogprobs.size for p in pairs])
        totals = counts[picks].sum(axis=1)
        values = np.divide(
            sums[picks].sum(axis=1), totals, out=np.zeros(resamples), where=totals > 0
        )
    else:
        values = np.array([p.diverged for p in pairs], dtype=float)[picks].mean(axis=1)
    low, high = np.quantile(values, [BOOTSTRAP_QUANTILE, 1 - BOOTSTRAP_QUANTILE])
    return float(low), float(high)
