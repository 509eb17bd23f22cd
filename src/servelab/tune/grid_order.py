"""A grid's untried settings ranked by the twin before the next one is launched.

A grid names every setting it will try; the order is free. Where finished trials can be
replayed at an untried setting (it differs from one of them only in limits the twin
replays), the setting the twin predicts best for the first objective goes next, so the
best region is measured first and a study cut short by its time budget has measured what
mattered. Settings the twin predicts to break a constraint at every draw go last (the
trial prunes them when it comes to them); settings it cannot replay keep the sampler's
order after the predicted ones.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.tune.results import ObjectiveSpec, TwinForecast
from servelab.tune.targets import Constraint
from servelab.tune.twin_forecast import surely_violated

__all__ = ["RankedSetting", "rank_untried", "untried_settings"]

Forecaster = Callable[[dict[str, Any], ObjectiveSpec | Constraint], TwinForecast | None]
"""The twin's prediction of a target at a setting, or None where it has none."""


@dataclass(frozen=True, slots=True)
class RankedSetting:
    """One untried setting, its predicted objective and whether a constraint rules it out."""

    params: dict[str, Any]
    forecast: TwinForecast
    ruled_out: str | None

    def text(self, rank: int, of: int) -> str:
        said = f"ranked {rank} of {of} untried settings by the twin: {self.forecast.text(None)}"
        return f"{said}; {self.ruled_out}" if self.ruled_out else said


def untried_settings(
    grid: Mapping[str, Sequence[Any]], tried: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every setting of the grid no trial has had, in the grid's own order."""
    seen = {json.dumps(dict(t), sort_keys=True) for t in tried}
    names = list(grid)
    out = []
    for values in itertools.product(*(grid[name] for name in names)):
        params = dict(zip(names, values, strict=True))
        if json.dumps(params, sort_keys=True) not in seen:
            out.append(params)
    return out


def rank_untried(
    untried: Sequence[dict[str, Any]],
    objective: ObjectiveSpec,
    constraints: Sequence[Constraint],
    forecast: Forecaster,
) -> list[RankedSetting]:
    """The untried settings the twin can predict, best first: by predicted objective,
    those predicted to break a constraint at every draw last."""
    ranked = []
    for params in untried:
        predicted = forecast(params, objective)
        if predicted is None:
            continue
        ruled_out = None
        for constraint in constraints:
            bound = forecast(params, constraint)
            if bound is not None and surely_violated(constraint, bound):
                ruled_out = f"predicted outside {constraint.text} at every draw"
                break
        ranked.append(RankedSetting(params, predicted, ruled_out))
    sign = -1.0 if objective.direction == "maximize" else 1.0
    return sorted(ranked, key=lambda r: (r.ruled_out is not None, sign * r.forecast.predicted))
