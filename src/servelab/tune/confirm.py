"""`tune run --confirm N`: the best and the default configurations re-measured N times
each, alternately, for the run-to-run band of the gain.

A trial is one measurement, and the best of many is the luckiest as well as the fastest;
its band (tune.noise) is within one run and cannot see what moves between launches (a
warm page cache, clocks, a neighbour). Here each pair launches both configurations through
the trial code (the same spec, load and sweep, no early stop), default first in even
pairs and best first in odd ones so that a drift over the pairs does not favour either;
each pair's best / default is one ratio, and the median with the smallest and largest of
them is the band. The gain is confirmed when every pair's best beat its default.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, Literal

from servelab.core.errors import ConfigError
from servelab.tune.params import apply_params
from servelab.tune.results import Confirmation, ConfirmRun, StudyResult
from servelab.tune.space import SearchSpace
from servelab.tune.trial import TrialContext, TrialEvent, TrialFailed, read_objective, sweep_spec

__all__ = ["CONFIRM_DIR", "confirm_best"]

CONFIRM_DIR = "confirm"


def confirm_best(
    result: StudyResult,
    space: SearchSpace,
    ctx: TrialContext,
    repeats: int,
    *,
    on_pair: Callable[[Confirmation], None] = lambda _c: None,
) -> Confirmation | None:
    """Re-measure the best and the default `repeats` times each; None where there is no
    single best or no default, or the best is the default."""
    if repeats < 1:
        raise ConfigError("--confirm takes at least 1 (pairs of launches)")
    if len(result.best) != 1 or result.default_trial is None:
        return None
    best, default = result.trial(result.best[0]), result.trial(result.default_trial)
    if best is None or default is None or best.number == default.number:
        return None
    maximize = space.objectives[0].direction == "maximize"
    confirmation = Confirmation(
        best_trial=best.number,
        default_trial=default.number,
        objective=space.objectives[0].label,
        repeats=repeats,
        text="",
    )
    params: dict[str, dict[str, Any]] = {"best": best.params, "default": default.params}
    for pair in range(repeats):
        order: tuple[Literal["best", "default"], ...] = (
            ("default", "best") if pair % 2 == 0 else ("best", "default")
        )
        for which in order:
            number = best.number if which == "best" else default.number
            run = _measure(ctx, space, params[which], pair, which, number)
            confirmation.runs.append(run)
        confirmation = _summarise(confirmation, maximize=maximize)
        on_pair(confirmation)
    return confirmation


def _measure(
    ctx: TrialContext,
    space: SearchSpace,
    params: dict[str, Any],
    pair: int,
    which: Literal["best", "default"],
    number: int,
) -> ConfirmRun:
    spec = apply_params(space.base, params)
    run_path = ctx.study_dir / CONFIRM_DIR / f"{pair:02d}-{which}"
    relative = str(run_path.relative_to(ctx.study_dir))
    role = f"confirm {which}, pair {pair + 1}"
    ctx.on_event(TrialEvent(number, role, params))
    try:
        summary = sweep_spec(ctx, spec, run_path, name=f"{space.name}-confirm-{pair:02d}-{which}")
    except TrialFailed as exc:
        ctx.on_event(TrialEvent(number, role, {}, "failed", str(exc)))
        return ConfirmRun(pair=pair, which=which, value=None, run_dir=relative, reason=str(exc))
    value, why = read_objective(summary, space)
    ctx.on_event(TrialEvent(number, role, {}, "complete" if why is None else "failed", why))
    return ConfirmRun(pair=pair, which=which, value=value, run_dir=relative, reason=why)


def _summarise(confirmation: Confirmation, *, maximize: bool) -> Confirmation:
    """The ratios of the pairs that measured both, their median and range, and one line."""
    by_pair: dict[int, dict[str, float | None]] = {}
    for run in confirmation.runs:
        by_pair.setdefault(run.pair, {})[run.which] = run.value
    ratios = [
        best / default
        for values in by_pair.values()
        if (best := values.get("best")) is not None and (default := values.get("default"))
    ]
    pairs = len(by_pair)
    if not ratios:
        return confirmation.model_copy(
            update={
                "ratios": [],
                "text": f"re-measured over {pairs} pairs: no pair measured both "
                f"(best trial {confirmation.best_trial}, default trial "
                f"{confirmation.default_trial})",
            }
        )
    median, low, high = statistics.median(ratios), min(ratios), max(ratios)
    confirmed = all(r > 1 for r in ratios) if maximize else all(r < 1 for r in ratios)
    verdict = "confirmed" if confirmed else "not confirmed: a pair's default was as good"
    text = (
        f"re-measured over {len(ratios)} alternating pairs: best (trial "
        f"{confirmation.best_trial}) / default (trial {confirmation.default_trial}) = "
        f"{median:.3f}x median, {low:.3f}x to {high:.3f}x run to run: {verdict}"
    )
    return confirmation.model_copy(
        update={
            "ratios": ratios,
            "median_ratio": median,
            "min_ratio": low,
            "max_ratio": high,
            "confirmed": confirmed,
            "text": text,
        }
    )
