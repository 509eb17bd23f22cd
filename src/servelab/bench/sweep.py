"""Which concurrency to run next, and when a sweep has seen enough.

An adaptive sweep starts at 1 and doubles. It ends after the level that shows the answer
or breaks the deployment, each for a reason a person would accept:

- **knee**: two levels past the knee (`bench.knee`): the plateau is seen over two
  doublings, so one level measured a little low does not end the sweep early;
- **errors**: more than 5% of a level's requests failed: more load only measures failures;
- **slo**: fewer than 90% of a level's requests met every SLO given;
- **kv**: the engine's KV cache was 95% full or more with requests waiting: more load only
  queues (from its /metrics or log stats);
- **max**: the next doubling would pass the largest concurrency worth trying (the model's
  KV capacity at these lengths where it is known, else a fixed cap).

A fixed sweep (`--concurrency 1,4,16`) runs its levels in order; the errors rule still
ends it, since a level where the engine fails is no measurement of the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servelab.bench.knee import find_knee
from servelab.bench.results import LevelSummary, SweepStop

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_SOURCE",
    "KV_FULL_FRACTION",
    "LEVELS_PAST_KNEE",
    "MAX_FAILED_FRACTION",
    "MIN_GOOD_FRACTION",
    "SweepPlan",
    "SweepStop",
    "next_level",
]

DEFAULT_MAX_CONCURRENCY = 1024
DEFAULT_MAX_SOURCE = "servelab's default cap"
LEVELS_PAST_KNEE = 2
MAX_FAILED_FRACTION = 0.05
MIN_GOOD_FRACTION = 0.90
KV_FULL_FRACTION = 0.95


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """The levels to run: `fixed` in order, or adaptive from `start` by `factor`."""

    fixed: tuple[int, ...] = ()
    start: int = 1
    factor: int = 2
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    max_source: str = DEFAULT_MAX_SOURCE
    """What set max_concurrency, for the stop's explanation."""

    @property
    def adaptive(self) -> bool:
        return not self.fixed

    def describe(self) -> str:
        if self.fixed:
            return "fixed: " + ", ".join(str(c) for c in self.fixed)
        return (
            f"adaptive: from {self.start}, x{self.factor} per level, up to "
            f"{self.max_concurrency} ({self.max_source})"
        )


def next_level(plan: SweepPlan, done: Sequence[LevelSummary]) -> int | SweepStop:
    """The next concurrency to run, or why the sweep ends after `done`."""
    if done and (stop := _broken(done[-1])) is not None:
        return stop
    if plan.fixed:
        if len(done) < len(plan.fixed):
            return plan.fixed[len(done)]
        return SweepStop(reason="levels", level=None, explanation="every level given was run")
    if not done:
        return min(plan.start, plan.max_concurrency)
    knee = find_knee(done)
    if knee.found and knee.levels_past >= LEVELS_PAST_KNEE:
        return SweepStop(
            reason="knee",
            level=done[-1].level,
            explanation=f"{knee.levels_past} levels past the knee at concurrency "
            f"{knee.concurrency}",
        )
    last = done[-1].max_concurrency or plan.start
    following = last * plan.factor
    if following > plan.max_concurrency:
        return SweepStop(
            reason="max",
            level=done[-1].level,
            explanation=f"the next level ({following}) would pass {plan.max_concurrency}, "
            f"{plan.max_source}",
        )
    return following


def _broken(level: LevelSummary) -> SweepStop | None:
    """The stop a level's own results call for: failures, SLOs, a full KV cache."""
    failed = level.failed or 0
    attempted = (level.completed or 0) + failed
    if attempted and failed / attempted > MAX_FAILED_FRACTION:
        return SweepStop(
            reason="errors",
            level=level.level,
            explanation=f"{level.failed} of {attempted} requests failed at concurrency "
            f"{_load(level)}, over {MAX_FAILED_FRACTION:.0%}",
        )
    if level.good_fraction is not None and level.good_fraction < MIN_GOOD_FRACTION:
        return SweepStop(
            reason="slo",
            level=level.level,
            explanation=f"{level.good_fraction:.0%} of requests met every SLO at concurrency "
            f"{_load(level)}, under {MIN_GOOD_FRACTION:.0%}",
        )
    engine = level.telemetry.engine if level.telemetry is not None else None
    if (
        engine is not None
        and engine.kv_usage_max is not None
        and engine.kv_usage_max >= KV_FULL_FRACTION
        and (engine.queued_max or 0) > 0
    ):
        return SweepStop(
            reason="kv",
            level=level.level,
            explanation=f"the KV cache was {engine.kv_usage_max:.0%} full with up to "
            f"{engine.queued_max:g} requests waiting at concurrency {_load(level)}",
        )
    return None


def _load(level: LevelSummary) -> str:
    return str(level.max_concurrency) if level.max_concurrency is not None else "?"
