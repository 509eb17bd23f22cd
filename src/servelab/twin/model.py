"""The fitted twin as something to run: its cost, its draws and the run's own workload,
replayed under any limits (the ones the run had, or ones it is asked about)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S
from servelab.sim.stepcost import LinearStepCost, StepCost, WrappedStepCost
from servelab.twin.compare import replayed_batch, replayed_metrics, replayed_window
from servelab.twin.fit import FittedCost
from servelab.twin.padding import KvPadding
from servelab.twin.records import LevelLoad
from servelab.twin.replay import EngineLimits, LevelReplay, ReplayRequest, replay_level
from servelab.twin.result import TwinResult
from servelab.twin.steps import StepSamples

__all__ = [
    "SLO_MISSES",
    "Reading",
    "ReplayedLevel",
    "StepFloor",
    "Twin",
    "level_load",
    "replay_all",
    "slo_miss_share",
]

SLO_MISSES = "slo_miss_share"
"""The replayed share of a level's requests that miss an SLO, where the run has SLOs."""

StepFloor = Callable[[int, int, int], float]
"""The least a step could take, in seconds, by what it holds (decoding requests, their
context tokens, prompt tokens): the hardware's own work, from servelab's model."""

Reading = Callable[[LinearStepCost], StepCost]
"""Another reading of a fitted cost: one the run cannot tell from the fit, which differs
from it only where the run has no steps (`servelab.twin.whatif`)."""


def level_load(level: LevelSummary, duration_s: float | None = None) -> LevelLoad:
    """How a level sent its requests (for `duration_s`, where it sent for a set time)."""
    if level.load_mode == "concurrency":
        return LevelLoad(level.level, "concurrency", float(level.max_concurrency or 1), duration_s)
    return LevelLoad(level.level, "request_rate", float(level.request_rate or 0.0), duration_s)


def replay_all(
    per_level: Mapping[int, list[ReplayRequest]],
    levels: Sequence[LevelSummary],
    fitted: FittedCost,
    limits: EngineLimits,
    overhead_s: float,
    *,
    draw: int | None = None,
    reading: Reading | None = None,
    floor: StepFloor | None = None,
    track_held: bool = True,
    duration_s: float | None = None,
) -> dict[int, LevelReplay]:
    """Every level replayed at the fit (or one of its bootstrap draws); with `floor`, no
    step faster than the hardware's own work; with `duration_s`, each level sends for
    that long, as one run for a set time did, rather than the requests it recorded."""
    linear = fitted.step_cost(draw, kv_capacity_tokens=limits.kv_capacity_tokens)
    cost: StepCost = reading(linear) if reading is not None else linear
    if floor is not None:
        cost = _Floored(cost, floor)
    out = {}
    for level in levels:
        rows = per_level.get(level.level)
        if rows is None:
            continue
        copies = [replace(r, prefill_chunks=[]) for r in rows]
        out[level.level] = replay_level(
            level_load(level, duration_s),
            copies,
            step_cost=cost,
            limits=limits,
            overhead_s=overhead_s,
            track_held=track_held,
        )
    return out


def slo_miss_share(
    replay: LevelReplay, slo_ms: Mapping[str, float], *, streamed: bool = True
) -> float:
    """Requests missing any SLO (an unknown value misses, as the bench counts it), as
    (misses + 1/2) / (requests + 1): never 0 or 1, so a change to it is a ratio even where
    every request met the SLOs or none did."""
    missed = 0
    sent = [r for r in replay.requests if r.sent_s is not None]
    for r in sent:
        if r.first_s is None or r.last_s is None or r.sent_s is None:
            missed += 1
            continue
        values = {
            "ttft": (r.first_s - r.sent_s) * MS_PER_S if streamed else None,
            "e2e": (r.last_s - r.sent_s) * MS_PER_S,
            "tpot": (r.last_s - r.first_s) / (r.output_tokens - 1) * MS_PER_S
            if streamed and r.output_tokens > 1
            else None,
        }
        if any((v := values.get(k)) is None or v > bound for k, bound in slo_ms.items()):
            missed += 1
    return (missed + 0.5) / (len(sent) + 1)


@dataclass(frozen=True, slots=True)
class _Floored(WrappedStepCost):
    """A step cost never below the hardware's own work: a line fitted where steps were
    launch-bound says nothing of a step that computes a thousand times more."""

    floor: StepFloor

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        fitted = self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        return max(fitted, self.floor(decode_batch, decode_context_tokens, prefill_tokens))


@dataclass(frozen=True, slots=True)
class ReplayedLevel:
    """One level replayed: its metrics at the fit and at each draw, and what it held."""

    level: int
    metrics: dict[str, float | None]
    draws: list[dict[str, float | None]]
    decode_batch: float | None
    preemptions: int
    refused: int
    """Requests the engine could not take at all (larger than its cache)."""
    prefill_steps: int
    prefill_tokens: int
    most_prefill: int
    most_decoding: int
    most_held: int = 0


@dataclass(frozen=True)
class Twin:
    """A run's fitted engine, able to replay the run's levels under other limits."""

    result: TwinResult
    cost: FittedCost
    overhead_s: float
    overhead_draws_s: Sequence[float]
    levels: Sequence[LevelSummary]
    per_level: Mapping[int, list[ReplayRequest]]
    prompts: Mapping[int, Mapping[int, int]]
    """Each level's requests' prompt tokens as sent (the metrics count them all)."""
    streamed: Mapping[int, bool]
    limits: EngineLimits
    draws: int
    slo_ms: Mapping[str, float] | None = None
    """The run's SLOs (ttft, tpot, e2e in ms), where it was given any."""
    floor: StepFloor | None = None
    """Where the model knows the deployment: no replayed step faster than its work."""
    samples: StepSamples | None = None
    """The gaps the cost was fitted to, where it was fitted to gaps (a joint refit pools
    them with other runs' gaps: `servelab.twin.joint`)."""
    kv_padding: KvPadding | None = None
    """Where the engine reads its KV padded to the cache's size (`servelab.twin.padding`):
    a change of the cache then changes every step, by what the run cannot show."""
    seen: tuple[int, int, int] | None = None
    """The most prompt tokens one step prefilled, requests one step decoded and KV tokens
    one step held, over every run the cost was fitted on, where that is more than this
    run's own."""
    level_duration_s: float | None = None
    """Where the run's levels each sent for a set time: a replay sends for as long (a
    faster engine gets more requests in that time, a slower one fewer), not the requests
    the run recorded. The fit's own replays keep to the records."""
    _memo: dict[tuple[EngineLimits, int, bool], dict[int, ReplayedLevel]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def replay(
        self,
        limits: EngineLimits | None = None,
        reading: Reading | None = None,
        *,
        with_draws: bool = True,
    ) -> dict[int, ReplayedLevel]:
        """Every level under `limits` (the run's own by default), at the fit and, with
        `with_draws`, at each bootstrap draw. The same question is replayed once."""
        limits = limits or self.limits
        key = (limits, id(reading) if reading is not None else 0, with_draws)
        if key not in self._memo or reading is not None:
            self._memo[key] = self._replay(limits, reading, with_draws)
        return self._memo[key]

    def _replay(
        self, limits: EngineLimits, reading: Reading | None, with_draws: bool
    ) -> dict[int, ReplayedLevel]:
        point = replay_all(
            self.per_level,
            self.levels,
            self.cost,
            limits,
            self.overhead_s,
            reading=reading,
            floor=self.floor,
            track_held=False,
            duration_s=self.level_duration_s,
        )
        count = min(self.draws, self.cost.draws.shape[0]) if with_draws else 0
        spread = [
            replay_all(
                self.per_level,
                self.levels,
                self.cost,
                limits,
                self._overhead(d),
                draw=d,
                reading=reading,
                floor=self.floor,
                track_held=False,
                duration_s=self.level_duration_s,
            )
            for d in range(count)
        ]
        out = {}
        for level, replay in point.items():
            prompts, streamed = self.prompts.get(level, {}), self.streamed.get(level, True)
            out[level] = ReplayedLevel(
                level=level,
                metrics=self._metrics(replay, prompts, streamed),
                draws=[self._metrics(s[level], prompts, streamed) for s in spread],
                decode_batch=replayed_batch(replay, replayed_window(replay)),
                preemptions=replay.preemptions,
                refused=sum(
                    1 for r in replay.requests if r.sent_s is not None and r.first_s is None
                ),
                prefill_steps=replay.prefill_steps,
                prefill_tokens=replay.prefill_tokens,
                most_prefill=replay.most_prefill,
                most_decoding=replay.most_decoding,
                most_held=replay.most_held,
            )
        return out

    def _metrics(
        self, replay: LevelReplay, prompts: Mapping[int, int], streamed: bool
    ) -> dict[str, float | None]:
        metrics = replayed_metrics(replay, prompts, streamed=streamed)
        if self.slo_ms:
            metrics[SLO_MISSES] = slo_miss_share(replay, self.slo_ms, streamed=streamed)
        return metrics

    def _overhead(self, draw: int) -> float:
        if draw < len(self.overhead_draws_s):
            return self.overhead_draws_s[draw]
        return self.overhead_s
