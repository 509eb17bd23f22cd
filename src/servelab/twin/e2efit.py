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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from servelab.core.units import MS_PER_S
from servelab.twin.fit import INTERVAL, FittedCost, TermFit, robust_fit
from servelab.twin.replay import LevelReplay
from servelab.twin.steps import TERMS

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
    cost, overhead, yardstick = start, 0.0, None
    rounds, converged = 0, False
    while rounds < max_rounds:
        rows, times, owners = _rows(replay(cost, overhead), measured_s)
        if not times.size:
            raise ValueError("no request of the run was replayed to its end")
        draws = resamples if yardstick is None else 0
        fitted, fitted_draws = _regress(rows, times, owners, draws, seed)
        new_cost = _as_cost(fitted, fitted_draws, rows.shape[0], owners)
        rounds += 1
        if yardstick is None:
            yardstick = [t.stderr for t in new_cost.terms]
        else:
            moved = [
                abs(a.value - b.value) > max(e, 1e-9)
                for a, b, e in zip(new_cost.terms, cost.terms, yardstick, strict=True)
            ]
            if not any(moved):
                converged = True
        cost = new_cost
        if converged:
            break
    rows, times, owners = _rows(replay(cost, overhead), measured_s)
    fitted, draws_all = _regress(rows, times, owners, resamples, seed)
    final = _as_cost(fitted, draws_all, rows.shape[0], owners)
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
            if request.held is None or key not in measured_s:
                continue
            rows.append(request.held)
            times.append(measured_s[key])
            owners.append(len(owners))
    return np.array(rows), np.array(times), np.array(owners)


def _regress(
    rows: np.ndarray, times: np.ndarray, owners: np.ndarray, resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    weight = np.ones_like(times)
    point = robust_fit(rows, times, weight)
    rng = np.random.default_rng(seed)
    draws = [point]
    for _ in range(resamples):
        picked = rng.choice(owners, size=owners.size, replace=True)
        draws.append(robust_fit(rows[picked], times[picked], weight[picked]))
    return point, np.array(draws[1:] if resamples else draws)


def _as_cost(values: np.ndarray, draws: np.ndarray, samples: int, owners: np.ndarray) -> FittedCost:
    draws_ms = draws * MS_PER_S
    low, high = np.percentile(draws_ms, INTERVAL, axis=0)
    stderr = draws_ms.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.zeros(len(TERMS))
    return FittedCost(
        terms=tuple(
            TermFit(name, float(v), float(e), float(lo), float(hi))
            for name, v, e, lo, hi in zip(TERMS, values * MS_PER_S, stderr, low, high, strict=True)
        ),
        draws=draws_ms,
        samples=samples,
        requests=int(np.unique(owners).size),
        residual_ms=0.0,
    )
