"""A trial's objective predicted before it launches: the twin of a finished trial that
differs from it only in limits the twin replays (running cap, step budget, KV cache),
replayed at the new trial's values.

Every finished trial is a run the twin can be fitted on, so the study learns as it goes:
the source is the finished trial nearest to the new one (fewest limits changed, then the
smallest change on a log scale). A trial that changes anything else (CUDA graphs, a
layout, a kernel) gets no prediction, and says why.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.bench.results import BenchSummary
from servelab.core.errors import ServelabError
from servelab.diagnose.check import factor_band
from servelab.diagnose.options import DiagnoseOptions
from servelab.diagnose.whatif_run import KNOB_LIMITS, fitted_twin
from servelab.store import RunDir
from servelab.tune.results import ObjectiveSpec, TwinForecast
from servelab.tune.targets import Constraint, level_at
from servelab.twin import Twin
from servelab.twin.joint import refit_jointly
from servelab.twin.whatif import what_if

__all__ = [
    "FinishedTrial",
    "forecast_trial",
    "limit_changes",
    "surely_violated",
    "with_measured_band",
]

_KNOB_PREFIX = "knobs."


@dataclass(frozen=True, slots=True)
class FinishedTrial:
    """A complete trial the twin can be fitted on."""

    number: int
    params: Mapping[str, Any]
    run_dir: Path


def limit_changes(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, int | None] | None:
    """The twin's limits that `new` sets differently from `base`; None when `new` changes
    anything the twin does not replay."""
    changes: dict[str, int | None] = {}
    for path in set(base) | set(new):
        if base.get(path) == new.get(path):
            continue
        limit = KNOB_LIMITS.get(path.removeprefix(_KNOB_PREFIX))
        value = new.get(path)
        if limit is None or not path.startswith(_KNOB_PREFIX) or not isinstance(value, int):
            return None
        changes[limit] = value
    return changes


def forecast_trial(
    params: Mapping[str, Any],
    finished: Sequence[FinishedTrial],
    objective: ObjectiveSpec | Constraint,
    options: DiagnoseOptions,
) -> TwinForecast | None:
    """The twin's prediction of an objective's (or a constraint's) metric at `params`;
    None where no finished trial differs from it in replayable limits alone."""
    candidates = [
        (trial, changes)
        for trial in finished
        if (changes := limit_changes(trial.params, params)) is not None
    ]
    if not candidates:
        return None
    trial, changes = min(
        candidates,
        key=lambda c: (len(c[1]), _distance(c[0].params, params), -c[0].number),
    )
    family = [
        other
        for other in finished
        if other is not trial and limit_changes(other.params, trial.params) is not None
    ]
    try:
        twin, pooled = _joint_twin(
            (trial.number, trial.run_dir),
            tuple((other.number, other.run_dir) for other in family),
            options.model_dump_json(),
        )
    except ServelabError:
        return None
    level = _level(twin, objective.at)
    if level is None:
        return None
    summary = next(lv for lv in twin.levels if lv.level == level)
    measured = getattr(summary, objective.metric, None)
    if not isinstance(measured, int | float) or not measured:
        return None
    result = what_if(twin, changes, metrics=(objective.metric,)) if changes else None
    forecast = result.forecast(level, objective.metric) if result is not None else None
    if result is not None and (forecast is None or forecast.factor is None):
        return None
    factor = forecast.factor if forecast is not None and forecast.factor else 1.0
    low = forecast.low if forecast is not None and forecast.low is not None else factor
    high = forecast.high if forecast is not None and forecast.high is not None else factor
    return TwinForecast(
        from_trial=trial.number,
        metric=objective.metric,
        at=objective.at,
        changes=changes,
        predicted=measured * factor,
        low=measured * low,
        high=measured * high,
        extrapolated=list(result.extrapolated) if result is not None else [],
        refitted_on=pooled,
    )


@functools.lru_cache(maxsize=32)
def _twin(run_dir: Path, options: str) -> Twin:
    """A finished trial's twin, fitted once per study process (`options` as JSON)."""
    return fitted_twin(run_dir, DiagnoseOptions.model_validate_json(options))[0]


@functools.lru_cache(maxsize=8)
def _joint_twin(
    trial: tuple[int, Path], family: tuple[tuple[int, Path], ...], options: str
) -> tuple[Twin, list[int]]:
    """A finished trial's twin (number, run) with its cost refitted on the gaps of every
    finished trial that differs from it only in replayable limits (runs of one engine), and
    which trials those were; a member whose run cannot be fitted is left out."""
    own = _twin(trial[1], options)
    others: list[tuple[int, Twin]] = []
    for number, run_dir in family:
        try:
            others.append((number, _twin(run_dir, options)))
        except ServelabError:
            continue
    joint = refit_jointly(own, [t for _, t in others])
    if joint is own:
        return own, []
    pooled = [trial[0], *(n for n, t in others if t.samples is not None and t.samples.size)]
    return joint, pooled


def _level(twin: Twin, at: float | None) -> int | None:
    level = level_at([lv for lv in twin.levels if lv.completed], at)
    return level.level if level is not None else None


def _distance(base: Mapping[str, Any], new: Mapping[str, Any]) -> float:
    return sum(
        abs(math.log(float(new[path]) / float(base[path])))
        for path in set(base) & set(new)
        if _whole(base[path]) and _whole(new[path]) and base[path] > 0 and new[path] > 0
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def surely_violated(constraint: Constraint, forecast: TwinForecast) -> bool:
    """Whether the whole predicted interval lies on the constraint's wrong side: a trial
    the twin says cannot meet it at any of its draws."""
    return constraint.violation(forecast.low) > 0 and constraint.violation(forecast.high) > 0


def with_measured_band(
    forecast: TwinForecast, source: Path, run_dir: Path, measured: float
) -> TwinForecast:
    """The forecast with the measured value's noise band: the block-bootstrap band of the
    new run's metric over the source run's, from both runs' requests (as diagnose's
    checks draw it), carried to the measured value."""
    a, b = RunDir(source).load_summary(BenchSummary), RunDir(run_dir).load_summary(BenchSummary)
    if a is None or b is None:
        return forecast
    level_a = level_at([lv for lv in a.levels if lv.completed], forecast.at)
    level_b = level_at([lv for lv in b.levels if lv.completed], forecast.at)
    if level_a is None or level_b is None:
        return forecast
    band = factor_band(source, run_dir, level_a, level_b, forecast.metric, False)
    old, new = getattr(level_a, forecast.metric, None), getattr(level_b, forecast.metric, None)
    if band is None or not isinstance(old, int | float) or not isinstance(new, int | float):
        return forecast
    if not old or not new:
        return forecast
    ratio = new / old
    return forecast.model_copy(
        update={"band_low": measured * band[0] / ratio, "band_high": measured * band[1] / ratio}
    )
