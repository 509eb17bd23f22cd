"""Which configured limit binds: each one lifted in the replay, the rest left as set.

A limit binds when lifting it moves the objective, and the binding limit is the one that
moves it most. The objective is read where the run hurt most: the share of requests that
miss the run's SLOs at its heaviest level where it has SLOs, otherwise median TTFT there;
and total throughput at the knee. Both are reported. A move counts only when
the fit's draws agree on its direction and it is larger than the replay's own miss of
that metric at that level: a gain the twin cannot tell from its own error is not a
finding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servelab.bench.results import LevelSummary
from servelab.twin.compare import REPRODUCED
from servelab.twin.model import SLO_MISSES, Twin
from servelab.twin.whatif import Forecast, WhatIf, what_if

__all__ = [
    "Lift",
    "Objective",
    "changes_text",
    "describe",
    "lift_limits",
    "lifted_value",
    "metric_name",
]

_TTFT, _TPOT, _THROUGHPUT, _E2E = (
    "median_ttft_ms",
    "median_tpot_ms",
    "total_throughput",
    "median_e2e_latency_ms",
)
_LOWER_IS_BETTER = {_TTFT, _TPOT, _E2E, "p90_ttft_ms", "p90_tpot_ms", SLO_MISSES}


@dataclass(frozen=True, slots=True)
class Objective:
    """Where the objective is read: the heaviest level's latency, the knee's throughput."""

    worst_level: int
    knee_level: int | None

    @classmethod
    def of(cls, levels: Sequence[LevelSummary], knee_concurrency: int | None) -> Objective:
        done = [lv for lv in levels if lv.completed]
        worst = max(
            done, key=lambda lv: (lv.max_concurrency or 0, lv.request_rate or 0.0, lv.level)
        )
        knee = next(
            (
                lv.level
                for lv in done
                if knee_concurrency and lv.max_concurrency == knee_concurrency
            ),
            worst.level,
        )
        return cls(worst_level=worst.level, knee_level=knee)


@dataclass(frozen=True)
class Lift:
    """One limit lifted in the replay, and what that did."""

    limit: str
    value: int | None
    lifted: int | None
    """The lifted value; None: no limit at all."""
    whatif: WhatIf
    latency: Forecast | None
    """The heaviest level's median TTFT (median E2E where nothing streamed)."""
    throughput: Forecast | None
    """Total throughput at the knee."""
    binding: bool
    score: float
    """The objective's move, as the log of its gain: 0 when it did not move."""
    trades: list[str]
    too_small: bool
    """The draws agree it moves, but by less than the replay's own miss there."""

    def gains(self) -> list[str]:
        out = []
        for forecast in (self.latency, self.throughput):
            if forecast is not None and forecast.factor is not None:
                out.append(describe(forecast))
        return out


def lifted_value(twin: Twin, limit: str, ceiling: int | None = None) -> int | None:
    """The most the run's workload could use of `limit`, and no more than `ceiling` (what
    the machine allows, where known): the cap to the heaviest level's concurrency; the step
    budget to the longest prompt in one step beside every request decoding, so that no
    prompt is split; the cache to every request that can be in flight at once held at its
    full length.

    The budget stops there: past it a step holds several whole prompts, whose activations
    the run never showed the engine has memory for. On one H100, the budget for 40 prompts
    of 2,048 tokens at once (82,320) ran transformers serve out of memory at its first
    loaded step."""
    closed = [lv.max_concurrency for lv in twin.levels if lv.max_concurrency]
    every_level_closed = bool(closed) and len(closed) == len(twin.levels)
    if limit == "running_cap":
        return max(closed) if every_level_closed else None
    if limit not in ("batch_tokens", "kv_capacity_tokens"):
        return None
    most = 0
    for level in twin.levels:
        rows = twin.per_level.get(level.level, [])
        if not rows:
            continue
        together = level.max_concurrency or len(rows)
        if limit == "batch_tokens":
            most = max(most, max(r.prompt_tokens for r in rows) + together)
        else:
            held = sorted((r.prompt_tokens + r.output_tokens for r in rows), reverse=True)
            most = max(most, sum(held[:together]))
    if not most:
        return None
    return most if ceiling is None else min(most, ceiling)


def lift_limits(
    twin: Twin,
    objective: Objective,
    limits: Sequence[str] | None = None,
    ceilings: Mapping[str, int] | None = None,
) -> list[Lift]:
    """Every set limit lifted on its own, no further than its ceiling (what the machine
    allows, where known), the most binding first. A cap already past what the run could
    use is skipped; a roomy cache is replayed with no limit and a roomy budget as it is, so
    that each is shown not to bind rather than left unsaid."""
    names = limits or ("running_cap", "kv_capacity_tokens", "batch_tokens")
    lifts = []
    for name in names:
        value = getattr(twin.limits, name)
        if value is None:
            continue
        ceiling = (ceilings or {}).get(name)
        if ceiling is not None and ceiling <= value:
            continue
        lifted = lifted_value(twin, name, ceiling)
        if lifted is not None and lifted <= value:
            if name == "running_cap":
                continue
            # a roomy cache is replayed with no limit; a roomy budget already takes the
            # longest prompt whole, and past that only memory the run never showed
            lifted = None if name == "kv_capacity_tokens" else value
        lifts.append(_lift(twin, objective, name, value, lifted))
    return sorted(lifts, key=lambda lift: -lift.score)


def _lift(twin: Twin, objective: Objective, name: str, value: int, lifted: int | None) -> Lift:
    whatif = what_if(twin, {name: lifted})
    latency = whatif.forecast(objective.worst_level, _latency_metric(twin, objective))
    knee = objective.knee_level if objective.knee_level is not None else objective.worst_level
    throughput = whatif.forecast(knee, _THROUGHPUT)
    moves = [_move(twin, f) for f in (latency, throughput) if f is not None]
    agreed = [m for m in moves if m[0] > 0]
    counted = [m for m in agreed if m[0] > m[1]]
    score = max((m[0] for m in counted), default=0.0)
    return Lift(
        limit=name,
        value=value,
        lifted=lifted,
        whatif=whatif,
        latency=latency,
        throughput=throughput,
        binding=bool(counted),
        score=score,
        trades=_trades(whatif, objective.worst_level),
        too_small=bool(agreed) and not counted,
    )


def _latency_metric(twin: Twin, objective: Objective) -> str:
    """The run's SLOs where it has any; else median TTFT (median E2E where nothing
    streamed)."""
    if twin.slo_ms:
        return SLO_MISSES
    return _TTFT if twin.streamed.get(objective.worst_level, True) else _E2E


def objective_misses(twin: Twin, objective: Objective) -> list[str]:
    """The objective's metrics the replay does not reproduce (off by more than REPRODUCED)
    where they are read, and the heaviest level's running requests where the engine
    reported its own."""
    streamed = twin.streamed.get(objective.worst_level, True)
    knee = objective.knee_level if objective.knee_level is not None else objective.worst_level
    read = ((objective.worst_level, _TTFT if streamed else _E2E), (knee, _THROUGHPUT))
    out = []
    for level, metric in read:
        miss = _signed_miss(twin, level, metric)
        if miss is not None and abs(math.expm1(miss)) > REPRODUCED:
            load = next((lv.load for lv in twin.result.levels if lv.level == level), level)
            out.append(f"{metric_name(metric)} at {load} off by {math.expm1(miss):+.0%}")
    worst = next((lv for lv in twin.result.levels if lv.level == objective.worst_level), None)
    if worst is not None and worst.engine_running_mean and worst.decode_batch_replayed:
        # the engine's own count of running requests: a replay that decodes more of them
        # at once than the engine ran at all (prefilling ones included) lands on the run's
        # throughput with its limits acting where the engine's did not. One-sided: the
        # engine's count also holds requests in prefill, which a decode batch does not.
        off = worst.decode_batch_replayed / worst.engine_running_mean - 1
        if off > REPRODUCED:
            out.append(
                f"running requests at {worst.load} {worst.decode_batch_replayed:.3g} where the "
                f"engine reported {worst.engine_running_mean:.3g} ({off:+.0%})"
            )
    return out


def _move(twin: Twin, forecast: Forecast) -> tuple[float, float]:
    """The log gain the fit's draws agree on (0 where they straddle no change), and the
    replay's own |log miss| of that metric at that level. Where the lift reaches past the
    run, the draws are those of the readings' middle: what the run cannot show widens the
    interval stated, and the finding says it is extrapolated, but it is not noise."""
    assert forecast.factor is not None and forecast.low is not None and forecast.high is not None
    lower = forecast.metric in _LOWER_IS_BETTER
    low = forecast.fit_low if forecast.fit_low is not None else forecast.low
    high = forecast.fit_high if forecast.fit_high is not None else forecast.high
    worst_case = 1 / high if lower else low
    gain = 1 / forecast.factor if lower else forecast.factor
    agreed = math.log(gain) if worst_case > 1 and gain > 1 else 0.0
    return agreed, _miss(twin, forecast.level, forecast.metric)


def _miss(twin: Twin, level: int, metric: str) -> float:
    signed = _signed_miss(twin, level, metric)
    return abs(signed) if signed is not None else 0.0


def _signed_miss(twin: Twin, level: int, metric: str) -> float | None:
    """log(replayed / measured) of a metric at a level; None where either is missing."""
    for replayed in twin.result.levels:
        if replayed.level == level:
            pair = replayed.metrics.get(metric)
            if pair is not None and pair.measured and pair.replayed:
                return math.log(pair.replayed / pair.measured)
    return None


def _trades(whatif: WhatIf, level: int) -> list[str]:
    """Metrics of the heaviest level the lift makes worse, beyond their draws' spread."""
    out = []
    for forecast in whatif.forecasts:
        if forecast.level != level or forecast.factor is None or forecast.low is None:
            continue
        lower = forecast.metric in _LOWER_IS_BETTER
        worse = forecast.low > 1 if lower else (forecast.high or 1) < 1
        if worse and forecast.metric in (_TPOT, _THROUGHPUT, _E2E, _TTFT):
            out.append(describe(forecast))
    return out


_NAMES = {
    _TTFT: "median TTFT",
    _TPOT: "median TPOT",
    _THROUGHPUT: "total throughput",
    _E2E: "median E2E",
    "output_throughput": "output throughput",
    "p90_ttft_ms": "p90 TTFT",
    "p90_tpot_ms": "p90 TPOT",
    SLO_MISSES: "share of requests missing the SLOs",
}


def metric_name(metric: str) -> str:
    return _NAMES.get(metric, metric)


def describe(forecast: Forecast) -> str:
    """'median TTFT 0.27x (0.09-0.31) at concurrency 8'."""
    return (
        f"{metric_name(forecast.metric)} {forecast.factor:.2f}x "
        f"({forecast.low:.2f}-{forecast.high:.2f}) at {forecast.load}"
    )


def changes_text(changes: Mapping[str, int | None]) -> str:
    return ", ".join(f"{k}={'none' if v is None else f'{v:,}'}" for k, v in changes.items())
