"""The twin of a run with no per-request records: one point per level.

The least-loaded level prices a prompt token: its median TTFT less one decode step,
over its mean prompt (the request overhead cannot be told apart from it here, and is
left at zero). Every level then gives its median TPOT (a step's length, as every
decoding request sees it) less the prefill its steps carried (the prompt tokens the level
prefilled per second times the step), against what its average step held: by Little's
law the requests in flight and the share of their time spent decoding, and their mean
context. With as many points as levels, only as many terms are fitted as the levels
leave a degree of freedom for (the base first, then per request, then per context
token); the others stay at zero. The intervals are leave-one-level-out fits: wide, as a
handful of points deserves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S
from servelab.twin.fit import FittedCost, nonnegative_fit
from servelab.twin.replay import ReplayRequest
from servelab.twin.steps import TERMS

__all__ = ["fit_from_levels", "level_requests"]

_ORDER = ("base", "per_seq", "per_context_token")
"""Which terms a fit on few levels takes first."""


def _point(level: LevelSummary) -> tuple[np.ndarray, float] | None:
    tpot, e2e, ttft = level.median_tpot_ms, level.mean_e2e_latency_ms, level.mean_ttft_ms
    completed = level.completed or 0
    if not tpot or not e2e or ttft is None or completed <= 0:
        return None
    decoding = (level.concurrency or 0.0) * max(e2e - ttft, 0.0) / e2e
    prompt = level.total_input_tokens / completed
    output = level.total_output_tokens / completed
    step_s = tpot / MS_PER_S
    prefill = (level.input_throughput or 0.0) * step_s
    row = np.array(
        [1.0, decoding, decoding * (prompt + output / 2), prefill, 1.0 if prefill else 0.0]
    )
    return row, step_s


def fit_from_levels(levels: Sequence[LevelSummary]) -> FittedCost:
    """The step cost from the levels' summaries; its draws leave one level out each."""
    points = [p for p in (_point(lv) for lv in levels) if p is not None]
    if not points:
        raise ValueError("no level has a median TPOT to fit a step cost to")
    per_prompt_s = _prompt_token_s(levels)
    prefill_column = TERMS.index("per_prefill_token")
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points]) - per_prompt_s * x[:, prefill_column]
    columns = [TERMS.index(name) for name in _ORDER[: max(len(points) - 1, 1)]]
    point = _fit(x, y, columns)
    draws = (
        [
            _fit(np.delete(x, i, axis=0), np.delete(y, i), columns[: max(len(points) - 2, 1)])
            for i in range(len(points))
        ]
        if len(points) > 2
        else [point]
    )
    point[prefill_column] = per_prompt_s
    for draw in draws:
        draw[prefill_column] = per_prompt_s
    residual = y + per_prompt_s * x[:, prefill_column] - x @ point
    return FittedCost.from_draws(
        point,
        np.array(draws),
        samples=len(points),
        requests=sum(lv.completed or 0 for lv in levels),
        residual_ms=float(np.sqrt(np.mean(residual**2))) * MS_PER_S,
    )


def _prompt_token_s(levels: Sequence[LevelSummary]) -> float:
    """Seconds per prompt token: the least-loaded level's TTFT beyond one decode step."""
    usable = [
        lv
        for lv in levels
        if lv.median_ttft_ms
        and lv.median_tpot_ms
        and (lv.completed or 0) > 0
        and lv.total_input_tokens > 0
    ]
    if not usable:
        return 0.0
    lowest = min(usable, key=lambda lv: (lv.concurrency or float("inf"), lv.level))
    prompt = lowest.total_input_tokens / (lowest.completed or 1)
    beyond = (lowest.median_ttft_ms or 0.0) - (lowest.median_tpot_ms or 0.0)
    return max(beyond, 0.0) / MS_PER_S / prompt


def _fit(x: np.ndarray, y: np.ndarray, columns: list[int]) -> np.ndarray:
    return nonnegative_fit(x, y, np.ones_like(y), columns)


def level_requests(level: LevelSummary, *, seed: int) -> list[ReplayRequest]:
    """The level's completed requests at its mean sizes: closed loop all at once, open
    loop at exponential gaps of its rate (a seeded draw)."""
    count = level.completed or 0
    if count <= 0:
        return []
    prompt = max(round(level.total_input_tokens / count), 1)
    output = max(round(level.total_output_tokens / count), 1)
    if level.load_mode == "concurrency" or not level.request_rate:
        sends = np.zeros(count)
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / level.request_rate, count)
        sends = np.cumsum(gaps) - gaps[0]
    return [ReplayRequest(i, prompt, output, float(s)) for i, s in enumerate(sends)]
