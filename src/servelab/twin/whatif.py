"""What a change of limits would do: the run's own levels replayed at the new values.

A prediction is a ratio of two replays of the same twin, the run's limits against the new
ones, so a bias the twin has on this run cancels; the measured value times that ratio is
the predicted value. Its interval is the spread of the same ratio over the fit's
bootstrap draws.

Where the new limits make steps the run never had, the fit is a line carried past its
last point, and the run cannot say how the step grows there. Two readings of the cost
agree with the run on every step it had and part only beyond it, one at each extreme:

- steps that prefill more prompt tokens than any step of the run: one that costs no more
  than the run's largest prefilling step, against one whose tokens past it cost what a
  step of only that many prompt tokens costs, per token (no gain from a larger chunk: the
  engine could always prefill them in the chunks the run shows it prefilling);
- steps that decode more requests than any step of the run: a step that costs no more
  than at the largest batch the run held, against one that grows in proportion to its
  requests past it (no gain from batching).

And where no gap of the run held a prefill (every request ran alone), the run cannot tell
a prompt's prefill from the time before it reaches the scheduler: both end the TTFT of a
request that waits for nothing. The fit puts it all in the request overhead, which other
requests never wait for; the other reading puts it all in the prefilling step, which they
do wait for once requests share steps.

Neither extreme is favoured: the predicted ratio is the geometric middle of every
combination of the readings, the interval spans the fit's and every combination's draws,
and the forecast says "extrapolated" and why.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from servelab.core.units import MS_PER_S
from servelab.sim.stepcost import LinearStepCost, ScaledStepCost, StepCost, WrappedStepCost
from servelab.twin.compare import load_label
from servelab.twin.fit import INTERVAL
from servelab.twin.metrics import METRICS
from servelab.twin.model import SLO_MISSES, Reading, ReplayedLevel, StepFloor, Twin
from servelab.twin.padding import PastPositions
from servelab.twin.replay import EngineLimits
from servelab.twin.steps import TERMS

__all__ = [
    "LIMIT_NAMES",
    "Forecast",
    "WhatIf",
    "launch_saved",
    "launch_saved_with_batch",
    "threads_scaled",
    "what_if",
    "what_if_step",
]

LIMIT_NAMES = ("running_cap", "kv_capacity_tokens", "batch_tokens")
"""The limits a replay can change (`servelab.twin.replay.EngineLimits`)."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """One metric of one level: measured, and what the new limits should make of it."""

    level: int
    load: str
    metric: str
    measured: float | None
    predicted: float | None
    """The measured value times `factor` (the replay's own value where none was measured)."""
    factor: float | None
    """New / old, from the replays."""
    low: float | None
    high: float | None
    fit_low: float | None = None
    fit_high: float | None = None
    """The point's own interval over the fit's draws, without the spread of the readings
    where the new limits reach past the run: whether the fit is sure of the direction."""


@dataclass(frozen=True)
class WhatIf:
    """The run's levels replayed under changed limits."""

    changes: Mapping[str, int | None]
    forecasts: list[Forecast]
    extrapolated: list[str]
    """Why the prediction reaches past what the run measured; empty when it does not."""
    refused: int
    """Requests the new limits could not take at all."""
    notes: list[str]

    def forecast(self, level: int, metric: str) -> Forecast | None:
        return next((f for f in self.forecasts if f.level == level and f.metric == metric), None)


def what_if(
    twin: Twin, changes: Mapping[str, int | None], *, metrics: Sequence[str] | None = None
) -> WhatIf:
    """Every level of the run replayed with `changes` applied to its limits (every metric
    twin.json compares, and the share missing the SLOs where the run has SLOs)."""
    if metrics is None:
        metrics = (*METRICS, SLO_MISSES) if twin.slo_ms else METRICS
    unknown = set(changes) - set(LIMIT_NAMES)
    if unknown:
        raise ValueError(f"no such limit: {', '.join(sorted(unknown))}")
    values = {name: getattr(twin.limits, name) for name in LIMIT_NAMES} | dict(changes)
    new_limits = EngineLimits(
        policy=twin.limits.policy,
        running_cap=values["running_cap"],
        kv_capacity_tokens=values["kv_capacity_tokens"],
        batch_tokens=values["batch_tokens"],
    )
    before = twin.replay()
    if _same(before, twin.replay(new_limits, with_draws=False)):
        return WhatIf(
            changes=dict(changes),
            forecasts=[
                _unchanged(twin, level, metric, before)
                for level in sorted(before)
                for metric in metrics
                if before[level].metrics.get(metric)
            ],
            extrapolated=[],
            refused=sum(lv.refused for lv in before.values()),
            notes=["the replay at the new values is the run's own, step for step"],
        )
    after = twin.replay(new_limits)
    fit: list[Pair] = [(before, after)]
    doubts = _doubts(twin, before, after)
    padded = _padding_doubt(twin, new_limits)
    if padded is not None:
        doubts.append(padded)
    extrapolated = [doubt.why for doubt in doubts]
    extremes: list[Pair] = []
    for ends in itertools.product(*(doubt.ends for doubt in doubts)) if doubts else ():
        read, variant = _combined(twin, ends)
        agrees = all(end.moved_ms_per_token == 0 for end in ends)
        extremes.append(
            (before if agrees else variant.replay(reading=read), variant.replay(new_limits, read))
        )
    forecasts = [
        _forecast(twin, level, metric, fit, extremes)
        for level in sorted(after)
        for metric in metrics
    ]
    notes = []
    if "kv_capacity_tokens" in changes and padded is None:
        notes.append(
            "a cache of another size can change the step itself (the attention kernels "
            "address a larger pool); one run cannot show that"
        )
    return WhatIf(
        changes=dict(changes),
        forecasts=[f for f in forecasts if f is not None],
        extrapolated=extrapolated,
        refused=sum(lv.refused for lv in after.values()),
        notes=notes,
    )


Pair = tuple[Mapping[int, ReplayedLevel], Mapping[int, ReplayedLevel]]
"""A reading's replays of the run: under its own limits, and under the new ones."""


def _forecast(
    twin: Twin, level: int, metric: str, fit: Sequence[Pair], extremes: Sequence[Pair]
) -> Forecast | None:
    """The metric's new / old: at the fit, or where the new limits reach past the run, the
    geometric middle of the extreme readings (the fit lies between them); the interval
    spans every reading's draws."""
    points, lows, highs, by_draw = [], [], [], []
    for before, after in [*fit, *extremes]:
        old, new = before.get(level), after.get(level)
        if old is None or new is None:
            return None
        point = _ratio(old.metrics.get(metric), new.metrics.get(metric))
        if point is None:
            return None
        each = [
            _ratio(a.get(metric), b.get(metric)) for a, b in zip(old.draws, new.draws, strict=True)
        ]
        ratios = [r for r in each if r is not None]
        points.append(point)
        by_draw.append(each)
        lows.append(min(float(np.percentile(ratios, INTERVAL[0])), point) if ratios else point)
        highs.append(max(float(np.percentile(ratios, INTERVAL[1])), point) if ratios else point)
    start = len(fit) if len(points) > len(fit) else 0
    factor = math.exp(sum(math.log(p) for p in points[start:]) / len(points[start:]))
    fit_low, fit_high = _middle_interval(by_draw[start:], factor)
    summary = next((lv for lv in twin.levels if lv.level == level), None)
    measured = getattr(summary, metric, None) if summary is not None else None
    fallback = [*fit, *extremes][0][1][level].metrics.get(metric)
    return Forecast(
        level=level,
        load=load_label(summary) if summary is not None else str(level),
        metric=metric,
        measured=measured,
        predicted=measured * factor if measured else fallback,
        factor=factor,
        low=min(lows),
        high=max(highs),
        fit_low=fit_low,
        fit_high=fit_high,
    )


def _middle_interval(
    by_draw: Sequence[Sequence[float | None]], factor: float
) -> tuple[float, float]:
    """The geometric middle of the readings at each of the fit's draws (the readings share
    their draws), and its INTERVAL: how sure the fit alone is of the point, apart from what
    the readings leave open."""
    middles = [
        math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        for ratios in zip(*by_draw, strict=True)
        if all(r is not None for r in ratios)
    ]
    if not middles:
        return factor, factor
    low, high = np.percentile(middles, INTERVAL)
    return min(float(low), factor), max(float(high), factor)


def what_if_step(
    twin: Twin, ends: Sequence[Reading | None], why: str, *, metrics: Sequence[str] = METRICS
) -> WhatIf:
    """Every level replayed with the step itself changed (the limits as set): each of
    `ends` is one end of what the change could do to the fitted cost (None: the cost as
    fitted); the point is their geometric middle, the interval spans both ends' draws."""
    before = twin.replay()
    extremes: list[Pair] = [
        (before, before if end is None else twin.replay(reading=end)) for end in ends
    ]
    forecasts = [
        _forecast(twin, level, metric, [], extremes)
        for level in sorted(before)
        for metric in metrics
    ]
    return WhatIf(
        changes={},
        forecasts=[f for f in forecasts if f is not None],
        extrapolated=[],
        refused=0,
        notes=[why],
    )


def launch_saved(saved_ms: float) -> Reading:
    """A step that launches its kernels as one graph: the fitted per-step cost, less what
    the launches cost (never below nothing)."""

    def read(cost: LinearStepCost) -> LinearStepCost:
        return replace(cost, base_ms=max(cost.base_ms - saved_ms, 0.0))

    return read


def threads_scaled(factor: float) -> Reading:
    """A step on `factor` times the threads, at the far end where all of it is compute that
    divides among them (the near end is the step as fitted: none of it does)."""

    def read(cost: LinearStepCost) -> StepCost:
        return ScaledStepCost(cost, time_scale=factor)

    return read


def launch_saved_with_batch(saved_ms: float, floor: StepFloor) -> Reading:
    """The other end of a step launched as one graph: the per-step saving, and with it
    every cost a request adds to the step beyond what the model says its GPU work adds
    (launches and host work per request, which a graph replay also takes away). A batched
    step then costs the graphed step of one request plus the model's GPU work for the rest
    of the batch, and never more than the fitted step less the per-step saving."""

    def read(cost: LinearStepCost) -> StepCost:
        return _GraphedBatch(launch_saved(saved_ms)(cost), floor)

    return read


@dataclass(frozen=True, slots=True)
class _GraphedBatch(WrappedStepCost):
    floor: StepFloor

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        fitted = self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        if decode_batch <= 1:
            return fitted
        each = round(decode_context_tokens / decode_batch)
        alone = self.inner.step_s(1, each, prefill_tokens)
        work = self.floor(decode_batch, decode_context_tokens, prefill_tokens)
        growth = max(work - self.floor(1, each, prefill_tokens), 0.0)
        return min(fitted, alone + growth)


def _same(before: Mapping[int, ReplayedLevel], after: Mapping[int, ReplayedLevel]) -> bool:
    """Whether the new limits changed nothing: the same metrics at every level (the replay
    is deterministic, so a limit that never acted gives the run back exactly)."""
    return before.keys() == after.keys() and all(
        before[level].metrics == after[level].metrics for level in before
    )


def _unchanged(
    twin: Twin, level: int, metric: str, before: Mapping[int, ReplayedLevel]
) -> Forecast:
    summary = next((lv for lv in twin.levels if lv.level == level), None)
    measured = getattr(summary, metric, None) if summary is not None else None
    return Forecast(
        level=level,
        load=load_label(summary) if summary is not None else str(level),
        metric=metric,
        measured=measured,
        predicted=measured if measured else before[level].metrics.get(metric),
        factor=1.0,
        low=1.0,
        high=1.0,
        fit_low=1.0,
        fit_high=1.0,
    )


def _ratio(old: float | None, new: float | None) -> float | None:
    if old is None or new is None or old <= 0 or new <= 0:
        return None
    return new / old


@dataclass(frozen=True, slots=True)
class _End:
    """One extreme of what the run cannot show: a shape for steps past the run's, or the
    request overhead moved into the prefilling step at so many ms per prompt token."""

    past: Callable[[StepCost], StepCost] | None = None
    moved_ms_per_token: float = 0.0


@dataclass(frozen=True, slots=True)
class _Doubt:
    """Something the run cannot show that the new limits depend on, and its two ends."""

    why: str
    ends: tuple[_End, _End]


def _doubts(
    twin: Twin, before: Mapping[int, ReplayedLevel], after: Mapping[int, ReplayedLevel]
) -> list[_Doubt]:
    """Each way the new limits reach past what the run shows, with the two readings of the
    cost that agree with it on every step it had and part beyond them."""
    out: list[_Doubt] = []
    seen_prefill, seen_batch, seen_held = twin.seen or (0, 0, 0)
    run_prefill, new_prefill = _reach(before, after, "most_prefill", seen_prefill)
    if new_prefill > run_prefill > 0:
        out.append(
            _Doubt(
                f"steps would prefill up to {new_prefill:,} prompt tokens, where the fitted steps "
                f"prefilled at most {run_prefill:,}: how a step's cost grows with its prompt "
                "tokens past that is not in the run, so the interval spans a step that costs no "
                f"more than at {run_prefill:,} and one whose tokens past it cost, each, what a "
                f"step of {run_prefill:,} prompt tokens alone costs per token",
                (
                    _End(past=_past_prefill(run_prefill, proportional=False)),
                    _End(past=_past_prefill(run_prefill, proportional=True)),
                ),
            )
        )
    run_batch, new_batch = _reach(before, after, "most_decoding", seen_batch)
    if new_batch > run_batch > 0:
        out.append(
            _Doubt(
                f"steps would decode up to {new_batch} requests, where the fitted steps decoded at "
                f"most {run_batch}: past that, the interval spans a step that costs no more "
                f"than at {run_batch} and one that grows in proportion to its requests",
                (
                    _End(past=_past_batch(run_batch, proportional=False)),
                    _End(past=_past_batch(run_batch, proportional=True)),
                ),
            )
        )
    run_held, new_held = _reach(before, after, "most_held", seen_held)
    positions = _past_positions_doubt(twin, run_held, new_held)
    if positions is not None:
        out.append(positions)
    moved = _unseen_prefill_ms_per_token(twin, before)
    if moved is not None and any(lv.most_decoding > 1 for lv in after.values()):
        out.append(
            _Doubt(
                "no gap of the run held a prefill, so its prompts' prefill cannot be told from "
                f"the request overhead ({twin.overhead_s * MS_PER_S:.3g} ms) that ends each "
                "lone request's TTFT: the interval spans that time spent before the scheduler, "
                f"as fitted, and spent in the prefilling step ({moved * 1e3:.3g} us per prompt "
                "token), where the requests sharing the step wait for it",
                (_End(), _End(moved_ms_per_token=moved)),
            )
        )
    return out


def _reach(
    before: Mapping[int, ReplayedLevel], after: Mapping[int, ReplayedLevel], most: str, seen: int
) -> tuple[int, int]:
    """The most of `most` (a ReplayedLevel field) one step held in the run's replay, or in
    any run the cost was fitted on (`seen`), and in the replay at the new limits."""
    run = max(max((getattr(lv, most) for lv in before.values()), default=0), seen)
    return run, max((getattr(lv, most) for lv in after.values()), default=0)


def _past_positions_doubt(twin: Twin, run_held: int, new_held: int) -> _Doubt | None:
    """Where the engine reads its KV padded and the new limits let a step hold more tokens
    than any step of the run, those steps read positions the run never read: the fit's
    line through its steps, against the step at the run's largest in proportion."""
    padding = twin.kv_padding
    if padding is None or run_held <= 0:
        return None
    reads = padding.positions(run_held, padding.pool)
    now = padding.positions(new_held, padding.pool)
    if now <= reads:
        return None

    def most(cost: StepCost) -> StepCost:
        return PastPositions(cost, padding, run_held)

    return _Doubt(
        f"steps would hold up to {new_held:,} KV tokens and read {now:,} padded positions, "
        f"where the run's held at most {run_held:,} and read {reads:,}: every query of a "
        "step attends to all of them, so the interval spans the fit's line past its steps "
        "and the step at the run's largest in proportion to the positions it reads",
        (_End(), _End(past=most)),
    )


def _padding_doubt(twin: Twin, new_limits: EngineLimits) -> _Doubt | None:
    """Where the engine reads its KV padded to the cache's size and the new limits change
    the cache, every step reads other positions; the two readings bound what they cost."""
    padding = twin.kv_padding
    if padding is None or new_limits.kv_capacity_tokens == padding.pool:
        return None
    new = new_limits.kv_capacity_tokens
    reads = padding.positions(padding.pool, padding.pool)
    now = padding.positions(padding.pool, new)
    if reads == now:
        return None
    return _Doubt(
        f"the engine reads its KV padded to the cache (up to {padding.interval:,} tokens at "
        f"a time): with a cache of {'no limit' if new is None else f'{new:,}'} tokens a "
        f"step that read {reads:,} positions reads up to {now:,}, at a cost the run, with "
        "one cache, does not show; the interval spans the model's memory traffic for the "
        f"positions ({padding.least_ms_per_position * 1e3:.3g} us each) and a step in "
        "proportion to the positions it reads",
        (_End(past=padding.reading(most=False)), _End(past=padding.reading(most=True))),
    )


def _combined(twin: Twin, ends: Sequence[_End]) -> tuple[Reading, Twin]:
    """One combination of the readings' ends, as one reading of the cost, and the twin it
    applies to (without the request overhead where an end moved it into the prefill)."""
    moved = sum(end.moved_ms_per_token for end in ends)
    shapes = [end.past for end in ends if end.past is not None]

    def read(cost: LinearStepCost) -> StepCost:
        out: StepCost = (
            replace(cost, per_prefill_token_ms=cost.per_prefill_token_ms + moved) if moved else cost
        )
        for shape in shapes:
            out = shape(out)
        return out

    if not moved:
        return read, twin
    none = [0.0] * len(twin.overhead_draws_s)
    return read, replace(twin, overhead_s=0.0, overhead_draws_s=none, _memo={})


def _unseen_prefill_ms_per_token(twin: Twin, before: Mapping[int, ReplayedLevel]) -> float | None:
    """The request overhead per prompt token of the least-loaded level, where the fit saw
    no prefill in any gap and has an overhead to move; None where the run shows prefill."""
    samples = twin.samples
    if samples is None or twin.overhead_s <= 0 or samples.size == 0:
        return None
    if np.any(samples.regressors[:, TERMS.index("per_prefill_token")] > 0):
        return None
    present = [lv for lv in twin.levels if lv.level in before]
    if not present:
        return None
    lowest = min(present, key=lambda lv: (lv.concurrency or math.inf, lv.level))
    prompts = [r.prompt_tokens for r in twin.per_level.get(lowest.level, []) if r.prompt_tokens]
    if not prompts:
        return None
    return twin.overhead_s * MS_PER_S / (sum(prompts) / len(prompts))


@dataclass(frozen=True, slots=True)
class _PastPrefill(WrappedStepCost):
    """The cost up to `tokens` prompt tokens a step; past it, a step costs as at `tokens`
    (flat) or that plus, per token past it, what a step of only `tokens` prompt tokens
    costs per token (proportional: no gain from a larger chunk)."""

    tokens: int
    proportional: bool

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        if prefill_tokens <= self.tokens:
            return self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        at_edge = self.inner.step_s(decode_batch, decode_context_tokens, self.tokens)
        if not self.proportional:
            return at_edge
        per_token = self.inner.step_s(0, 0, self.tokens) / self.tokens
        return at_edge + (prefill_tokens - self.tokens) * per_token


def _past_prefill(tokens: int, *, proportional: bool) -> Callable[[StepCost], StepCost]:
    def read(cost: StepCost) -> _PastPrefill:
        return _PastPrefill(cost, tokens, proportional)

    return read


@dataclass(frozen=True, slots=True)
class _PastBatch(WrappedStepCost):
    """The fitted cost up to `batch` decoding requests; past it, a step costs as at `batch`
    (flat) or that times the requests over `batch` (proportional: no gain from batching
    past what the run held), its prefill priced as at `batch` either way."""

    batch: int
    proportional: bool

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        if decode_batch <= self.batch:
            return self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        context = round(decode_context_tokens * self.batch / decode_batch)
        whole = self.inner.step_s(self.batch, context, prefill_tokens)
        if not self.proportional:
            return whole
        at_edge = self.inner.step_s(self.batch, context, 0)
        return at_edge * decode_batch / self.batch + (whole - at_edge)


def _past_batch(batch: int, *, proportional: bool) -> Callable[[StepCost], StepCost]:
    def read(cost: StepCost) -> _PastBatch:
        return _PastBatch(cost, batch, proportional)

    return read
