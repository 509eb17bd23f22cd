"""What a change of limits would do: the run's own levels replayed at the new values.

A prediction is a ratio of two replays of the same twin, the run's limits against the new
ones, so a bias the twin has on this run cancels; the measured value times that ratio is
the predicted value. Its interval is the spread of the same ratio over the fit's
bootstrap draws.

Where the new limits make steps the run never had, the fit is a line carried past its
last point, and the run cannot say how the step grows there. Two readings of the cost
agree with the run on every step it had and part only beyond it, one at each extreme:

- steps that prefill more prompt tokens than any step of the run: a prefilling step that
  costs as at the run's mean chunk whatever it holds, against one whose cost beyond a
  decode step (the least-loaded level's measured TPOT) grows in proportion to its prompt
  tokens;
- steps that decode more requests than any step of the run: a step that costs no more
  than at the largest batch the run held, against one that grows in proportion to its
  requests past it (no gain from batching).

Neither extreme is favoured: the predicted ratio is their geometric middle, the interval
spans the fit's and both readings' draws, and the forecast says "extrapolated" and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from servelab.sim.stepcost import LinearStepCost
from servelab.twin.compare import load_label
from servelab.twin.fit import INTERVAL
from servelab.twin.metrics import METRICS
from servelab.twin.model import SLO_MISSES, Reading, ReplayedLevel, Twin
from servelab.twin.replay import EngineLimits

__all__ = ["LIMIT_NAMES", "Forecast", "WhatIf", "launch_saved", "what_if", "what_if_step"]

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
    extremes: list[Pair] = []
    extrapolated = []
    for why, readings, agrees in _other_readings(twin, before, after):
        extrapolated.append(why)
        extremes += [
            (before if agrees else twin.replay(reading=reading), twin.replay(new_limits, reading))
            for reading in readings
        ]
    forecasts = [
        _forecast(twin, level, metric, fit, extremes)
        for level in sorted(after)
        for metric in metrics
    ]
    notes = []
    if "kv_capacity_tokens" in changes:
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
    points, lows, highs = [], [], []
    for before, after in [*fit, *extremes]:
        old, new = before.get(level), after.get(level)
        if old is None or new is None:
            return None
        point = _ratio(old.metrics.get(metric), new.metrics.get(metric))
        if point is None:
            return None
        ratios = [
            r
            for a, b in zip(old.draws, new.draws, strict=True)
            if (r := _ratio(a.get(metric), b.get(metric))) is not None
        ]
        points.append(point)
        lows.append(min(float(np.percentile(ratios, INTERVAL[0])), point) if ratios else point)
        highs.append(max(float(np.percentile(ratios, INTERVAL[1])), point) if ratios else point)
    middle = points[len(fit) :] or points
    factor = math.exp(sum(math.log(p) for p in middle) / len(middle))
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
    )


def what_if_step(
    twin: Twin, ends: Sequence[Reading], why: str, *, metrics: Sequence[str] = METRICS
) -> WhatIf:
    """Every level replayed with the step itself changed (the limits as set): each of
    `ends` is one end of what the change could do to the fitted cost; the point is their
    geometric middle, the interval spans both ends' draws."""
    before = twin.replay()
    extremes: list[Pair] = [(before, twin.replay(reading=end)) for end in ends]
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
    )


def _ratio(old: float | None, new: float | None) -> float | None:
    if old is None or new is None or old <= 0 or new <= 0:
        return None
    return new / old


def _other_readings(
    twin: Twin, before: Mapping[int, ReplayedLevel], after: Mapping[int, ReplayedLevel]
) -> list[tuple[str, list[Reading], bool]]:
    """For each way the new limits reach past the run, the two readings of the cost that
    agree with it on every step it had and part beyond them, and whether they replay the
    run's own limits exactly as the fit does (then that replay is not made again)."""
    out: list[tuple[str, list[Reading], bool]] = []
    seen_prefill, seen_batch = twin.seen or (0, 0)
    run_prefill = max(max((lv.most_prefill for lv in before.values()), default=0), seen_prefill)
    new_prefill = max((lv.most_prefill for lv in after.values()), default=0)
    steps = sum(lv.prefill_steps for lv in before.values())
    if new_prefill > run_prefill > 0 and steps:
        chunk = sum(lv.prefill_tokens for lv in before.values()) / steps
        decode_ms = _decode_step_ms(twin, before)
        measured = (
            f"from a decode step of what the least-loaded level measured ({decode_ms:.3g} ms)"
            if decode_ms is not None
            else "from the fit's decode step"
        )
        out.append(
            (
                f"steps would prefill up to {new_prefill:,} prompt tokens, where the fitted steps "
                f"prefilled at most {run_prefill:,}: how a step's cost grows with its prompt "
                "tokens past that is not in the run, so the interval spans a prefilling step "
                f"that costs as at the run's mean chunk ({chunk:,.0f} tokens) and one whose "
                f"cost grows in proportion to its prompt tokens {measured}",
                [_per_step(chunk), _per_token(chunk, decode_ms)],
                False,
            )
        )
    run_batch = max(max((lv.most_decoding for lv in before.values()), default=0), seen_batch)
    new_batch = max((lv.most_decoding for lv in after.values()), default=0)
    if new_batch > run_batch > 0:
        out.append(
            (
                f"steps would decode up to {new_batch} requests, where the fitted steps decoded at "
                f"most {run_batch}: past that, the interval spans a step that costs no more "
                f"than at {run_batch} and one that grows in proportion to its requests",
                [
                    _past_batch(run_batch, proportional=False),
                    _past_batch(run_batch, proportional=True),
                ],
                True,
            )
        )
    return out


def _decode_step_ms(twin: Twin, before: Mapping[int, ReplayedLevel]) -> float | None:
    """The least-loaded level's measured median TPOT, where its tokens streamed."""
    present = [lv for lv in twin.levels if lv.level in before]
    if not present:
        return None
    lowest = min(present, key=lambda lv: (lv.concurrency or math.inf, lv.level))
    tpot = lowest.median_tpot_ms
    return tpot if tpot and tpot > 0 else None


def _per_token(chunk: float, decode_ms: float | None) -> Reading:
    """A prefilling step's cost beyond a decode step, per prompt token; equal to the fit at
    the run's mean chunk."""

    def read(cost: LinearStepCost) -> LinearStepCost:
        base = cost.base_ms
        if decode_ms is not None:
            base = min(base, max(decode_ms - cost.per_seq_ms, 0.0))
        moved = cost.base_ms - base + cost.prefill_step_ms
        return replace(
            cost,
            base_ms=base,
            per_prefill_token_ms=cost.per_prefill_token_ms + moved / chunk,
            prefill_step_ms=0.0,
        )

    return read


def _per_step(chunk: float) -> Reading:
    """A prefilling step costs as at the run's mean chunk, whatever it prefills."""

    def read(cost: LinearStepCost) -> LinearStepCost:
        return replace(
            cost,
            per_prefill_token_ms=0.0,
            prefill_step_ms=cost.prefill_step_ms + cost.per_prefill_token_ms * chunk,
        )

    return read


@dataclass(frozen=True, slots=True)
class _PastBatch:
    """The fitted cost up to `batch` decoding requests; past it, a step costs as at `batch`
    (flat) or that times the requests over `batch` (proportional: no gain from batching
    past what the run held), its prefill priced as at `batch` either way."""

    inner: LinearStepCost
    batch: int
    proportional: bool

    @property
    def kv_capacity_tokens(self) -> int | None:
        return self.inner.kv_capacity_tokens

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        if decode_batch <= self.batch:
            return self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        context = round(decode_context_tokens * self.batch / decode_batch)
        whole = self.inner.step_s(self.batch, context, prefill_tokens)
        if not self.proportional:
            return whole
        at_edge = self.inner.step_s(self.batch, context, 0)
        return at_edge * decode_batch / self.batch + (whole - at_edge)


def _past_batch(batch: int, *, proportional: bool) -> Reading:
    def read(cost: LinearStepCost) -> _PastBatch:
        return _PastBatch(cost, batch, proportional)

    return read
