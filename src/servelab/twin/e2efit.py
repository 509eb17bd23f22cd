"""The step cost of a run whose answers came whole (no stream, so no gaps between
tokens): fitted to each request's end-to-end time by alternating replay and regression.

A request's time in the engine is the sum of the steps it lived through, from its
arrival (part of the step it arrived in) to the step of its last token. Which steps those
were, and what each held, is what the replay says under the configured limits; with the
steps fixed, each request's time is linear in the cost's terms (so many steps, so many
decoding requests summed over them, ...). The time from its send to the scheduler is a
constant per request that, without a first token to pin it, trades freely against the
steps every request of a like size lives through: it is not fitted here, and left at 0.
So: replay under the current cost, regress every request's measured time on what its
replayed steps held, replay under the new cost, until no term moves by more than its
standard error (the first regression's bootstrap), or `MAX_ROUNDS`.

Each request counts by its relative miss (weights 1 / time squared): a request's time
wanders with the machine's speed over it, in proportion to its length, and unweighted the
longest ones decide every term. At a queued level those are waits, which measure how fast
requests leave the queue: the same for every cost of that throughput. So a run capped at
2 requests, whose waits at 64 streams were 50 times its lone requests' times, was fitted
unweighted to prefills of 99 ms and decode steps that cost nothing, where its lone
requests showed 1.7 ms a token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from servelab.twin.fit import FittedCost, bootstrap, settled
from servelab.twin.replay import LevelReplay

__all__ = ["E2eFit", "fit_by_replay"]

Replayer = Callable[[FittedCost, float], Mapping[int, LevelReplay]]
"""Replays every level under a cost and a request overhead (seconds)."""


@dataclass(frozen=True)
class E2eFit:
    """The fitted cost, the request overhead (0: not fitted) and how the rounds went."""

    cost: FittedCost
    overhead_s: float
    overhead_draws_s: list[float]
    rounds: int
    converged: bool


def fit_by_replay(
    start: FittedCost,
    measured_s: Mapping[tuple[int, int], float],
    replay: Replayer,
    *,
    max_rounds: int,
    resamples: int,
    seed: int = 0,
) -> E2eFit:
    """Alternate replay and regression from `start`; `measured_s` maps (level, index) to a
    request's measured send-to-last-token time."""
    cost, overhead = start, 0.0
    yardstick: FittedCost | None = None
    rounds, converged = 0, False
    while rounds < max_rounds:
        rows, times, owners = _rows(replay(cost, overhead), measured_s)
        if not times.size:
            raise ValueError("no request of the run was replayed to its end")
        draws = resamples if yardstick is None else 0
        new_cost = _regress(rows, times, owners, draws, seed)
        rounds += 1
        if yardstick is None:
            yardstick = new_cost
        else:
            converged = settled(new_cost, cost, yardstick)
        cost = new_cost
        if converged:
            break
    rows, times, owners = _rows(replay(cost, overhead), measured_s)
    final = _regress(rows, times, owners, resamples, seed)
    return E2eFit(final, overhead, [], rounds, converged)


def _rows(
    replays: Mapping[int, LevelReplay], measured_s: Mapping[tuple[int, int], float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row per request replayed to its end: what its steps held."""
    rows: list[tuple[float, ...]] = []
    times: list[float] = []
    owners: list[int] = []
    for level, replayed in replays.items():
        for request in replayed.requests:
            key = (level, request.index)
            if request.held is None or measured_s.get(key, 0.0) <= 0:
                continue
            rows.append(request.held)
            times.append(measured_s[key])
            owners.append(len(owners))
    return np.array(rows), np.array(times), np.array(owners)


def _regress(
    rows: np.ndarray, times: np.ndarray, owners: np.ndarray, resamples: int, seed: int
) -> FittedCost:
    point, draws = bootstrap(rows, times, 1.0 / times**2, owners, resamples=resamples, seed=seed)
    return FittedCost.from_draws(
        point, draws, samples=rows.shape[0], requests=int(np.unique(owners).size), residual_ms=0.0
    )
