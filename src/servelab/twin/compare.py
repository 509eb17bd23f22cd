"""A replayed level beside the measured one: the same metrics on both sides, the replay's
interval over the fit's draws, and how much of the run the replay explains."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S
from servelab.twin.fit import INTERVAL
from servelab.twin.metrics import METRICS, level_metrics
from servelab.twin.records import RequestTimeline
from servelab.twin.replay import LevelReplay
from servelab.twin.result import MetricPair, TwinLevel

__all__ = [
    "REPRODUCED",
    "compare_level",
    "load_label",
    "metric_pair",
    "replayed_batch",
    "replayed_e2e_ms",
    "replayed_metrics",
    "replayed_window",
]

REPRODUCED = 0.25
"""A replayed metric within this share of the measured one reproduces it: the bar the
twin's fidelity is reported against (docs/TWIN.md), and the one diagnose trusts a replay's
ranking of the limits by."""


def compare_level(
    level: LevelSummary,
    replay: LevelReplay,
    spread: Sequence[LevelReplay],
    requests: Sequence[RequestTimeline],
) -> TwinLevel:
    measured_rows = [r for r in requests if r.level == level.level and not r.warmup]
    streamed = all(r.streamed for r in measured_rows)
    measured = level_metrics(
        [r.send_s for r in measured_rows],
        [r.first_s for r in measured_rows],
        [r.last_s for r in measured_rows],
        [r.output_tokens for r in measured_rows],
        [r.prompt_tokens for r in measured_rows],
        streamed=streamed,
    ).values
    prompts = {r.index: r.prompt_tokens for r in measured_rows}
    replayed = replayed_metrics(replay, prompts, streamed=streamed)
    others = [replayed_metrics(s, prompts, streamed=streamed) for s in spread]
    by_index = {r.index: r for r in measured_rows}
    e2e_pairs = [
        (r.last_s - r.sent_s, by_index[r.index].last_s - by_index[r.index].send_s)
        for r in replay.requests
        if r.last_s is not None and r.sent_s is not None and r.index in by_index
    ]
    lows = sum(min(a, b) for a, b in e2e_pairs)
    highs = sum(max(a, b) for a, b in e2e_pairs)
    window = max(r.last_s for r in measured_rows) - min(r.send_s for r in measured_rows)
    decoding = sum(r.last_s - r.first_s for r in measured_rows) if streamed else None
    replay_window = replayed_window(replay)
    telemetry = level.telemetry.engine if level.telemetry is not None else None
    return TwinLevel(
        level=level.level,
        load=load_label(level),
        requests=len(measured_rows),
        metrics={
            name: metric_pair(measured[name], replayed[name], [o[name] for o in others])
            for name in METRICS
        },
        explained_share=lows / highs if highs > 0 else None,
        decode_batch_measured=decoding / window if decoding is not None and window > 0 else None,
        decode_batch_replayed=replayed_batch(replay, replay_window),
        engine_running_mean=telemetry.running_mean if telemetry is not None else None,
        preemptions=replay.preemptions,
    )


def replayed_metrics(
    replay: LevelReplay, prompts: Mapping[int, int], *, streamed: bool = True
) -> dict[str, float | None]:
    done = [r for r in replay.requests if r.first_s is not None and r.sent_s is not None]
    return level_metrics(
        [r.sent_s or 0.0 for r in done],
        [r.first_s or 0.0 for r in done],
        [r.last_s or 0.0 for r in done],
        [r.output_tokens for r in done],
        [prompts.get(r.index, r.prompt_tokens) for r in done],
        streamed=streamed,
    ).values


def replayed_window(replay: LevelReplay) -> float:
    done = [r for r in replay.requests if r.last_s is not None and r.sent_s is not None]
    if not done:
        return 0.0
    return max(r.last_s or 0.0 for r in done) - min(r.sent_s or 0.0 for r in done)


def replayed_batch(replay: LevelReplay, window: float) -> float | None:
    return replay.decode_seconds / window if window > 0 else None


def metric_pair(
    measured: float | None, replayed: float | None, others: Sequence[float | None]
) -> MetricPair:
    values = [v for v in others if v is not None]
    low, high = (
        (float(np.percentile(values, INTERVAL[0])), float(np.percentile(values, INTERVAL[1])))
        if values
        else (None, None)
    )
    error = replayed / measured - 1.0 if measured and replayed is not None else None
    return MetricPair(measured=measured, replayed=replayed, low=low, high=high, error=error)


def load_label(level: LevelSummary) -> str:
    if level.load_mode == "concurrency":
        return f"concurrency {level.max_concurrency}"
    return f"rate {level.request_rate:g}/s" if level.request_rate else "open loop"


def replayed_e2e_ms(replay: LevelReplay) -> float | None:
    done = [
        r.last_s - r.sent_s
        for r in replay.requests
        if r.last_s is not None and r.sent_s is not None
    ]
    return float(np.median(done)) * MS_PER_S if done else None
