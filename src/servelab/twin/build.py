"""The twin of a run: its step cost fitted from its own records, its levels replayed.

Streamed requests are fitted by their gaps (`servelab.twin.steps`), answers that came
whole by their end-to-end times (`servelab.twin.e2efit`), a run with no requests.jsonl
by its level summaries (`servelab.twin.levels`). For streams, fitting and replaying
alternate. What a step prefilled is not in the client's records,
so the first fit places each prompt by the step budget alone; each replay then says
where the engine, run as configured, prefilled every prompt, and the next fit places
them there. It stops when no term moves by more than its own standard error (from the
first fit's bootstrap), and says so when that has not happened within `MAX_ROUNDS`.

The time from a request's send to its arrival in the scheduler (HTTP, tokenizer, the
hop into the engine's process) is not a step: it is fitted as the median TTFT the
least-loaded level's replay leaves unexplained, and added to every request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S
from servelab.twin.compare import (
    compare_level,
    load_label,
    metric_pair,
    replayed_batch,
    replayed_e2e_ms,
    replayed_metrics,
    replayed_window,
)
from servelab.twin.e2efit import fit_by_replay
from servelab.twin.fit import INTERVAL, FittedCost, fit_cost, fit_cost_constant, settled
from servelab.twin.levels import fit_from_levels, level_requests
from servelab.twin.metrics import METRICS
from servelab.twin.model import Twin, level_load, replay_all
from servelab.twin.records import RequestTimeline, timelines
from servelab.twin.replay import EngineLimits, LevelReplay, ReplayRequest
from servelab.twin.result import (
    TWIN_SCHEMA,
    TwinFit,
    TwinLevel,
    TwinLimit,
    TwinPolicy,
    TwinResult,
    TwinTerm,
)
from servelab.twin.steps import PrefillPlacement, budget_placement, step_samples

__all__ = ["MAX_ROUNDS", "TwinInputs", "build_twin", "fit_twin", "level_load"]

MAX_ROUNDS = 6
STDERR_RESAMPLES = 16
"""Bootstrap draws of the first fit: only its standard errors are used, as the yardstick
of whether a later round still moves the terms."""
_UNITS = {
    "base": "ms per step",
    "per_seq": "ms per decoding request",
    "per_context_token": "ms per context token",
    "per_prefill_token": "ms per prompt token",
    "prefill_step": "ms per step that prefills",
}


@dataclass(frozen=True)
class TwinInputs:
    """A run as the twin needs it: its levels, its request rows, the limits and policy."""

    levels: Sequence[LevelSummary]
    rows: Iterable[Mapping[str, Any]]
    engine: str | None
    limits: EngineLimits
    limit_sources: Mapping[str, str]
    level_duration_s: float | None = None
    """Where each level sent for a set time (`--duration`): the replays under other limits
    send for as long."""


def build_twin(
    inputs: TwinInputs, *, resamples: int = 48, draws: int = 8, seed: int = 0
) -> TwinResult:
    """Fit the run's engine and replay every level of it."""
    return fit_twin(inputs, resamples=resamples, draws=draws, seed=seed).result


def fit_twin(inputs: TwinInputs, *, resamples: int = 48, draws: int = 8, seed: int = 0) -> Twin:
    """The run's fitted engine, ready to replay under other limits, with its twin.json."""
    twin = _fit(inputs, resamples=resamples, draws=draws, seed=seed)
    slo = next((lv.slo_ms for lv in inputs.levels if lv.slo_ms), None)
    if not slo and inputs.level_duration_s is None:
        return twin
    return replace(twin, slo_ms=slo, level_duration_s=inputs.level_duration_s, _memo={})


def _fit(inputs: TwinInputs, *, resamples: int, draws: int, seed: int) -> Twin:
    levels = [lv for lv in inputs.levels if (lv.completed or 0) > 0]
    requests = [r for r in timelines(inputs.rows) if r.level in {lv.level for lv in levels}]
    if not requests:
        return _from_levels(inputs, levels, draws=draws, seed=seed)
    answers = _from_answers(inputs, levels, requests, resamples=resamples, draws=draws, seed=seed)
    streamed = [r for r in requests if r.streamed]
    if not streamed:
        return _compared(answers, requests)
    gaps = _from_requests(inputs, levels, streamed, resamples=resamples, draws=draws, seed=seed)
    chosen = _better(gaps, answers)
    return _compared(chosen, streamed if chosen.result.fit.source == "requests" else requests)


def _better(gaps: Twin, answers: Twin) -> Twin:
    """The fit whose replay comes closer to the run, saying which.

    Gaps see each step, but not the steps a stream was not decoding in (a prefill behind
    which a request's tokens arrive all at once shows as gaps of nothing); end-to-end times
    see every step a request lived through, but not which of them cost what. Each is
    fitted, each replays the run, and the one whose levels' median TTFT, TPOT and E2E are
    closer to the measured (the mean of |log(replayed / measured)|) is kept."""
    gap_miss, answer_miss = _miss(gaps.result), _miss(answers.result)
    chosen, other = (gaps, answers) if gap_miss <= answer_miss else (answers, gaps)
    note = (
        f"fitted from {chosen.result.fit.source}, whose replay is off the measured medians by "
        f"{min(gap_miss, answer_miss):.0%} on average (log scale), rather than "
        f"{other.result.fit.source} ({max(gap_miss, answer_miss):.0%})"
    )
    result = chosen.result.model_copy(update={"notes": [*chosen.result.notes, note]})
    return replace(chosen, result=result)


_JUDGED = ("median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms")


def _miss(twin: TwinResult) -> float:
    """The mean |log(replayed / measured)| over the levels' judged medians."""
    logs = [
        abs(math.log(pair.replayed / pair.measured))
        for level in twin.levels
        for name in _JUDGED
        if (pair := level.metrics.get(name)) is not None
        and pair.measured
        and pair.replayed
        and pair.measured > 0
        and pair.replayed > 0
    ]
    return sum(logs) / len(logs) if logs else math.inf


def _from_requests(
    inputs: TwinInputs,
    levels: list[LevelSummary],
    requests: list[RequestTimeline],
    *,
    resamples: int,
    draws: int,
    seed: int,
) -> Twin:
    limits = inputs.limits
    work = _prompt_work(requests, levels)
    position = {(r.level, r.index, r.warmup): i for i, r in enumerate(requests)}
    gaps = np.concatenate([np.diff(r.chunk_s) for r in requests])
    step_guess = float(np.median(gaps[gaps > 0])) if np.any(gaps > 0) else 0.0
    placement = budget_placement(requests, work, budget=limits.batch_tokens, step_s=step_guess)
    first = fit_cost(step_samples(requests, placement), resamples=STDERR_RESAMPLES, seed=seed)
    fitted, rounds, converged = first, 1, False
    per_level = _replay_inputs(requests, work, levels)
    while rounds < MAX_ROUNDS:
        overhead = _overhead_s(per_level, levels, requests, position, fitted, limits)
        replays = replay_all(per_level, levels, fitted, limits, overhead)
        placement = _placement_from(replays, requests, position, placement)
        refit = fit_cost(step_samples(requests, placement), resamples=0, seed=seed)
        rounds += 1
        converged = settled(refit, fitted, first)
        fitted = refit
        if converged:
            break
    samples = step_samples(requests, placement)
    final = fit_cost(samples, resamples=resamples, seed=seed)
    overhead = _overhead_s(per_level, levels, requests, position, final, limits)
    notes = [] if converged else [_unsettled("the prefill placement")]
    fit = TwinFit(
        source="requests",
        samples=final.samples,
        requests=final.requests,
        residual_ms=final.residual_ms,
        rounds=rounds,
        converged=converged,
        resamples=resamples,
        notes=notes,
    )
    spread = _overhead_spread(per_level, levels, requests, position, final, limits, draws)
    twin = _finish(inputs, levels, requests, per_level, final, overhead, spread, fit, draws)
    return replace(twin, samples=samples)


def _from_answers(
    inputs: TwinInputs,
    levels: list[LevelSummary],
    requests: list[RequestTimeline],
    *,
    resamples: int,
    draws: int,
    seed: int,
) -> Twin:
    """Answers that came whole: the cost fitted to each request's time by replay."""
    limits = inputs.limits
    work = _prompt_work(requests, levels)
    per_level = _replay_inputs(requests, work, levels)
    measured = {(r.level, r.index): r.last_s - r.send_s for r in requests if not r.warmup}
    lowest = _lowest_load(levels, per_level)
    mine = [r for r in requests if r.level == lowest.level and not r.warmup]
    per_token = float(np.median([(r.last_s - r.send_s) / max(r.output_tokens, 1) for r in mine]))
    start = fit_cost_constant(per_token)

    def replay(cost: FittedCost, overhead_s: float) -> dict[int, LevelReplay]:
        return replay_all(per_level, levels, cost, limits, overhead_s)

    fitted = fit_by_replay(
        start, measured, replay, max_rounds=MAX_ROUNDS, resamples=resamples, seed=seed
    )
    notes = [
        "the cost is fitted to each request's end-to-end time over the steps its replay "
        "lived through"
        + (
            ""
            if any(r.streamed for r in requests)
            else " (answers came whole: no TTFT or TPOT is compared)"
        )
    ]
    if not fitted.converged:
        notes.append(_unsettled("the replayed steps"))
    fit = TwinFit(
        source="end-to-end times",
        samples=fitted.cost.samples,
        requests=fitted.cost.requests,
        residual_ms=None,
        rounds=fitted.rounds,
        converged=fitted.converged,
        resamples=resamples,
        notes=notes,
    )
    return _finish(
        inputs,
        levels,
        requests,
        per_level,
        fitted.cost,
        fitted.overhead_s,
        fitted.overhead_draws_s,
        fit,
        draws,
    )


def _unsettled(what: str) -> str:
    return (
        f"{what} did not settle in {MAX_ROUNDS} rounds of fitting and replaying: the terms "
        "still moved by more than their standard error"
    )


def _finish(
    inputs: TwinInputs,
    levels: list[LevelSummary],
    requests: list[RequestTimeline],
    per_level: Mapping[int, list[ReplayRequest]],
    cost: FittedCost,
    overhead_s: float,
    overhead_draws_s: Sequence[float],
    fit: TwinFit,
    draws: int,
) -> Twin:
    """Replay every level at the fit and compare with the run (the replays at the fit's
    draws, which give each metric its interval, come once a fit is kept: `_compared`)."""
    twin_levels = _compare(inputs.limits, levels, requests, per_level, cost, overhead_s, 0)
    return Twin(
        result=_result(inputs, cost, overhead_s, overhead_draws_s, fit, twin_levels),
        cost=cost,
        overhead_s=overhead_s,
        overhead_draws_s=list(overhead_draws_s),
        levels=levels,
        per_level=per_level,
        prompts={
            lv.level: {
                r.index: r.prompt_tokens for r in requests if r.level == lv.level and not r.warmup
            }
            for lv in levels
        },
        streamed={
            lv.level: all(r.streamed for r in requests if r.level == lv.level and not r.warmup)
            for lv in levels
        },
        limits=inputs.limits,
        draws=draws,
    )


def _compare(
    limits: EngineLimits,
    levels: Sequence[LevelSummary],
    requests: Sequence[RequestTimeline],
    per_level: Mapping[int, list[ReplayRequest]],
    cost: FittedCost,
    overhead_s: float,
    draws: int,
) -> list[TwinLevel]:
    replays = replay_all(per_level, levels, cost, limits, overhead_s, track_held=False)
    spread = [
        replay_all(per_level, levels, cost, limits, overhead_s, draw=d, track_held=False)
        for d in range(min(draws, cost.draws.shape[0]))
    ]
    return [
        compare_level(lv, replays[lv.level], [s[lv.level] for s in spread], requests)
        for lv in levels
        if lv.level in per_level
    ]


def _compared(twin: Twin, requests: Sequence[RequestTimeline]) -> Twin:
    """The kept fit's levels with each replayed metric's interval over the draws."""
    levels = _compare(
        twin.limits,
        twin.levels,
        requests,
        twin.per_level,
        twin.cost,
        twin.overhead_s,
        twin.draws,
    )
    return replace(twin, result=twin.result.model_copy(update={"levels": levels}))


def _prompt_work(requests: Sequence[RequestTimeline], levels: Sequence[LevelSummary]) -> list[int]:
    """Prompt tokens each request had computed: its prompt less its share of the level's
    prefix-cache hits (the engine's count), shared out by the tokens it repeated."""
    hit_share: dict[int, float] = {}
    for level in levels:
        cache = level.prefix_cache
        shared = cache.shared_tokens if cache is not None else 0
        hits = cache.hits if cache is not None and cache.hits is not None else 0.0
        hit_share[level.level] = min(hits / shared, 1.0) if shared else 0.0
    return [
        max(r.prompt_tokens - round(r.shared_tokens * hit_share.get(r.level, 0.0)), 1)
        for r in requests
    ]


def _replay_inputs(
    requests: Sequence[RequestTimeline], work: Sequence[int], levels: Sequence[LevelSummary]
) -> dict[int, list[ReplayRequest]]:
    """Each level's measured requests as replay requests, times from its first send."""
    out: dict[int, list[ReplayRequest]] = {}
    for level in levels:
        mine = [
            (r, w)
            for r, w in zip(requests, work, strict=True)
            if r.level == level.level and not r.warmup
        ]
        if not mine:
            continue
        start = min(r.send_s for r, _ in mine)
        previous: dict[int, RequestTimeline] = {}
        rows = []
        for r, w in sorted(mine, key=lambda pair: pair[0].send_s):
            think = 0.0
            if r.session is not None:
                before = previous.get(r.session)
                think = max(r.send_s - before.last_s, 0.0) if before is not None else 0.0
                previous[r.session] = r
            rows.append(
                ReplayRequest(
                    index=r.index,
                    prompt_tokens=w,
                    output_tokens=max(r.output_tokens, 1),
                    send_s=r.send_s - start,
                    session=r.session,
                    turn=r.turn,
                    think_s=think,
                )
            )
        out[level.level] = rows
    return out


def _lowest_load(levels: Sequence[LevelSummary], per_level: Mapping[int, Any]) -> LevelSummary:
    present = [lv for lv in levels if lv.level in per_level]
    return min(present, key=lambda lv: (lv.concurrency or float("inf"), lv.level))


def _ttft_gaps(
    per_level: Mapping[int, list[ReplayRequest]],
    levels: Sequence[LevelSummary],
    requests: Sequence[RequestTimeline],
    position: Mapping[tuple[int, int, bool], int],
    fitted: FittedCost,
    limits: EngineLimits,
    draw: int | None = None,
) -> np.ndarray:
    """Measured TTFT less replayed TTFT (no overhead) at the least-loaded level."""
    lowest = _lowest_load(levels, per_level)
    replay = replay_all(
        {lowest.level: per_level[lowest.level]}, [lowest], fitted, limits, 0.0, draw=draw
    )[lowest.level]
    gaps = []
    for r in replay.requests:
        if r.first_s is None or r.sent_s is None:
            continue
        measured = requests[position[(lowest.level, r.index, False)]].ttft_s
        gaps.append(measured - (r.first_s - r.sent_s))
    return np.asarray(gaps)


def _overhead_s(
    per_level: Mapping[int, list[ReplayRequest]],
    levels: Sequence[LevelSummary],
    requests: Sequence[RequestTimeline],
    position: Mapping[tuple[int, int, bool], int],
    fitted: FittedCost,
    limits: EngineLimits,
) -> float:
    gaps = _ttft_gaps(per_level, levels, requests, position, fitted, limits)
    return max(float(np.median(gaps)), 0.0) if gaps.size else 0.0


def _overhead_spread(
    per_level: Mapping[int, list[ReplayRequest]],
    levels: Sequence[LevelSummary],
    requests: Sequence[RequestTimeline],
    position: Mapping[tuple[int, int, bool], int],
    fitted: FittedCost,
    limits: EngineLimits,
    draws: int,
) -> list[float]:
    out = []
    for d in range(min(draws, fitted.draws.shape[0])):
        gaps = _ttft_gaps(per_level, levels, requests, position, fitted, limits, draw=d)
        if gaps.size:
            out.append(max(float(np.median(gaps)), 0.0))
    return out


def _placement_from(
    replays: Mapping[int, LevelReplay],
    requests: Sequence[RequestTimeline],
    position: Mapping[tuple[int, int, bool], int],
    previous: PrefillPlacement,
) -> PrefillPlacement:
    """Each replayed request's prefill chunks, as time before its first token; requests
    the replay did not run (warm-ups) keep their previous placement."""
    chunks = list(previous.chunks)
    for level, replay in replays.items():
        for r in replay.requests:
            if r.first_s is None or not r.prefill_chunks:
                continue
            at = position[(level, r.index, False)]
            chunks[at] = tuple(
                (max(r.first_s - end, 0.0), n) for end, n in r.prefill_chunks if end <= r.first_s
            )
    return PrefillPlacement(tuple(chunks))


def _result(
    inputs: TwinInputs,
    fitted: FittedCost,
    overhead_s: float,
    overhead_draws: Sequence[float],
    fit: TwinFit,
    levels: list[TwinLevel],
) -> TwinResult:
    policy = inputs.limits.policy
    limits = inputs.limits
    draws_ms = [d * MS_PER_S for d in overhead_draws]
    return TwinResult(
        schema=TWIN_SCHEMA,
        engine=inputs.engine,
        policy=TwinPolicy(
            name=policy.name,
            running_reserve=policy.running_reserve,
            admit_reserve=policy.admit_reserve,
            reserve_floor=policy.reserve_floor,
            admit_headroom=policy.admit_headroom,
            decodes_in_budget=policy.decodes_in_budget,
            victim=policy.victim,
            requeue_front=policy.requeue_front,
        ),
        limits=[
            TwinLimit(name=name, value=value, source=inputs.limit_sources.get(name, "not known"))
            for name, value in (
                ("running_cap", limits.running_cap),
                ("kv_capacity_tokens", limits.kv_capacity_tokens),
                ("batch_tokens", limits.batch_tokens),
            )
        ],
        terms=[
            TwinTerm(
                name=t.name,
                unit=_UNITS[t.name],
                value=t.value,
                stderr=t.stderr if fit.resamples else None,
                low=t.low if fit.resamples else None,
                high=t.high if fit.resamples else None,
            )
            for t in fitted.terms
        ],
        request_overhead_ms=TwinTerm(
            name="request_overhead",
            unit="ms per request, send to scheduler",
            value=overhead_s * MS_PER_S,
            stderr=float(np.std(draws_ms, ddof=1)) if len(draws_ms) > 1 else None,
            low=float(np.percentile(draws_ms, INTERVAL[0])) if draws_ms else None,
            high=float(np.percentile(draws_ms, INTERVAL[1])) if draws_ms else None,
        ),
        fit=fit,
        levels=levels,
    )


def _from_levels(inputs: TwinInputs, levels: list[LevelSummary], *, draws: int, seed: int) -> Twin:
    """No requests.jsonl: fit each level's median TPOT to what its steps held on average,
    and replay requests of the level's mean sizes."""
    fitted = fit_from_levels(levels)
    per_level = {lv.level: level_requests(lv, seed=seed) for lv in levels}
    per_level = {k: v for k, v in per_level.items() if v}
    limits = inputs.limits
    overhead_s = 0.0
    replays = replay_all(per_level, levels, fitted, limits, overhead_s)
    spread = [
        replay_all(per_level, levels, fitted, limits, overhead_s, draw=d)
        for d in range(min(draws, fitted.draws.shape[0]))
    ]
    twin_levels = []
    for level in levels:
        if level.level not in replays:
            continue
        replay = replays[level.level]
        replayed = replayed_metrics(replay, {})
        others = [replayed_metrics(s[level.level], {}) for s in spread]
        measured = {name: getattr(level, name) for name in METRICS}
        e2e_measured = level.median_e2e_latency_ms
        e2e = replayed_e2e_ms(replay)
        telemetry = level.telemetry.engine if level.telemetry is not None else None
        window = replayed_window(replay)
        twin_levels.append(
            TwinLevel(
                level=level.level,
                load=load_label(level),
                requests=level.completed or 0,
                metrics={
                    n: metric_pair(measured[n], replayed[n], [o[n] for o in others])
                    for n in METRICS
                },
                explained_share=(
                    min(e2e, e2e_measured) / max(e2e, e2e_measured)
                    if e2e and e2e_measured
                    else None
                ),
                decode_batch_measured=None,
                decode_batch_replayed=replayed_batch(replay, window),
                engine_running_mean=telemetry.running_mean if telemetry is not None else None,
                preemptions=replay.preemptions,
            )
        )
    fit = TwinFit(
        source="level summaries",
        samples=len(levels),
        requests=sum(lv.completed or 0 for lv in levels),
        residual_ms=fitted.residual_ms,
        rounds=1,
        converged=True,
        resamples=int(fitted.draws.shape[0]),
        notes=[
            "fitted from the levels' summaries: no requests.jsonl, so each level gives one "
            "point (its median TPOT against its mean batch), a prompt token is priced by "
            "the least-loaded level's TTFT (the request overhead is not told apart from "
            "it), its requests are replayed at the level's mean sizes, and the terms' "
            "intervals are leave-one-level-out"
        ],
    )
    return Twin(
        result=_result(inputs, fitted, overhead_s, [], fit, twin_levels),
        cost=fitted,
        overhead_s=overhead_s,
        overhead_draws_s=[],
        levels=levels,
        per_level=per_level,
        prompts={},
        streamed={lv.level: True for lv in levels},
        limits=limits,
        draws=draws,
    )
