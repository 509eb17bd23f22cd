"""The tuning study's plot, from study.json: each trial's objective, or two objectives'
trade-off.

One objective: the objective against the trial number, every trial a point, the running
best of the feasible trials as a step line, the default trial marked. Two objectives: the
trials in the plane of the two, the study's Pareto set joined. The renderer colours a
series by its `run`; here a series' run is its class of trial (feasible, infeasible,
failed or pruned, the default, the best), so each class keeps one colour and one legend
entry. Pure: the document in, a `Plot` out, drawn by render.py like every other plot.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.report.plots._load import scale_for
from servelab.report.plots.data import Line, LineRole, Panel, Plot
from servelab.tune.results import ObjectiveSpec, StudyResult, TrialRow

__all__ = ["TUNING_KEY", "TUNING_PARETO_KEY", "tuning_plot"]

TUNING_KEY = "tuning"
"""One objective: the objective against the trial number."""
TUNING_PARETO_KEY = "tuning_pareto"
"""Two objectives (or more: the first two): the Pareto scatter."""

_FEASIBLE = "feasible"
_INFEASIBLE = "infeasible"
_BEST = "best"
_DEFAULT = "default"
_FAILED = "failed or pruned"
_CLASSES = (_FEASIBLE, _INFEASIBLE, _BEST, _DEFAULT, _FAILED)
"""In this order, so a class has the same colour in both plots: blue, vermillion, green,
pink, orange."""


def tuning_plot(study: StudyResult) -> Plot:
    """The study's plot: `tuning` for one objective, `tuning_pareto` for two or more."""
    if len(study.objectives) >= 2:
        return _pareto(study)
    return _by_trial(study)


def _by_trial(study: StudyResult) -> Plot:
    objective = study.objectives[0] if study.objectives else None
    measured = [t for t in _measured(study, 1) if t.number != study.default_trial]
    default = [t for t in _measured(study, 1) if t.number == study.default_trial]
    values = [t.values[0] for t in [*measured, *default] if t.values]
    stopped = [t for t in study.trials if t.state in ("failed", "pruned")]
    series: list[Line] = []
    if objective is not None and values:
        worst = min(values) if objective.direction == "maximize" else max(values)
        series += _points(_FEASIBLE, "trial", [t for t in measured if t.feasible is not False])
        series += _points(_INFEASIBLE, "trial", [t for t in measured if t.feasible is False])
        if stopped:
            series.append(
                _line(
                    _FAILED,
                    "no value, at the worst",
                    [(float(t.number), worst) for t in stopped],
                    "points",
                )
            )
        series += _points(_DEFAULT, f"trial {study.default_trial}", default, labels=("default",))
        steps = _running_best(study, objective)
        if steps:
            series.append(_line(_BEST, "so far", steps, "frontier"))
    label = objective.label if objective is not None else "objective"
    unit = f" ({objective.unit})" if objective is not None else ""
    in_unit = f" in {objective.unit}" if objective is not None else ""
    scale = scale_for(values)
    return Plot(
        key=TUNING_KEY,
        title=f"{label} by trial",
        caption=(
            f"Each point is a trial, x its number, y its {label}{in_unit}, "
            f"{_better(objective)}. Colours tell feasible trials (every constraint met) "
            "from infeasible ones; failed and pruned trials measured nothing and sit at the "
            "worst value measured. The step line is the best feasible value found so far, "
            "the marked point the default spec's trial."
        ),
        runs=_CLASSES,
        panels=(
            Panel(
                "tuning",
                "trial number",
                f"{label}{unit}",
                y_scale=scale,
                y_min=0 if scale == "linear" else None,
                x_integer=True,
            ),
        ),
        series=tuple(series),
        notes=_not_drawn(study, 1),
        missing=None if series else _why_empty(study),
    )


def _pareto(study: StudyResult) -> Plot:
    first, second = study.objectives[0], study.objectives[1]
    measured = [t for t in _measured(study, 2) if t.number != study.default_trial]
    default = [t for t in _measured(study, 2) if t.number == study.default_trial]
    best = set(study.best)
    others = [t for t in measured if t.number not in best]
    front = sorted(
        (t for t in [*measured, *default] if t.number in best and t.values),
        key=lambda t: (t.values or [0.0])[0],
    )
    series: list[Line] = [
        *_points(_FEASIBLE, "trial", [t for t in others if t.feasible is not False], axes=2),
        *_points(_INFEASIBLE, "trial", [t for t in others if t.feasible is False], axes=2),
    ]
    if front:
        series += _points(
            _BEST, "Pareto set", front, labels=tuple(f"#{t.number}" for t in front), axes=2
        )
        if len(front) > 1:
            series.append(
                _line(_BEST, "frontier", [(t.values[0], t.values[1]) for t in front if t.values])
            )
    series += _points(_DEFAULT, f"trial {study.default_trial}", default, ("default",), axes=2)
    xs = [x for line in series for x in line.x]
    ys = [y for line in series for y in line.y]
    return Plot(
        key=TUNING_PARETO_KEY,
        title=f"{first.label} against {second.label}",
        caption=(
            f"Each point is a measured trial: x its {first.label} ({first.unit}, "
            f"{_better(first)}), y its {second.label} ({second.unit}, {_better(second)}). "
            "The Pareto set, the feasible trials no other feasible trial beats on both, is "
            "labelled with the trials' numbers and joined; infeasible trials (a constraint "
            "not met) are told apart, and the default spec's trial is marked. Failed and "
            "pruned trials measured nothing and are not drawn."
        ),
        runs=_CLASSES,
        panels=(
            Panel(
                "tuning",
                f"{first.label} ({first.unit})",
                f"{second.label} ({second.unit})",
                x_scale=scale_for(xs),
                y_scale=scale_for(ys),
            ),
        ),
        series=tuple(series),
        notes=_not_drawn(study, 2),
        missing=None if series else _why_empty(study),
    )


def _measured(study: StudyResult, count: int) -> list[TrialRow]:
    """Complete trials with the first `count` objectives measured, by number."""
    return sorted(
        (
            t
            for t in study.trials
            if t.state == "complete" and t.values is not None and len(t.values) >= count
        ),
        key=lambda t: t.number,
    )


def _running_best(study: StudyResult, objective: ObjectiveSpec) -> list[tuple[float, float]]:
    """The best feasible value after each trial, as the corners of a step line that runs to
    the study's last trial."""
    sign = 1.0 if objective.direction == "maximize" else -1.0
    corners: list[tuple[float, float]] = []
    best: float | None = None
    for trial in _measured(study, 1):
        if trial.feasible is False or not trial.values:
            continue
        value = trial.values[0]
        if best is None or sign * value > sign * best:
            if best is not None:
                corners.append((float(trial.number), best))
            corners.append((float(trial.number), value))
            best = value
    last = max((t.number for t in study.trials), default=None)
    if best is not None and last is not None and corners[-1][0] < last:
        corners.append((float(last), best))
    return corners


def _points(
    run: str,
    name: str,
    trials: Sequence[TrialRow],
    labels: tuple[str, ...] = (),
    *,
    axes: int = 1,
) -> list[Line]:
    """Trials as markers: (number, objective) for one axis, (objective 1, objective 2) for
    two; no line where there is no trial."""
    if axes == 1:
        xy = [(float(t.number), t.values[0]) for t in trials if t.values]
    else:
        xy = [(t.values[0], t.values[1]) for t in trials if t.values]
    if not xy:
        return []
    return [_line(run, name, xy, "points", labels)]


def _line(
    run: str,
    name: str,
    xy: Sequence[tuple[float, float]],
    role: LineRole = "frontier",
    labels: tuple[str, ...] = (),
) -> Line:
    return Line(
        run,
        name,
        "tuning",
        tuple(float(x) for x, _ in xy),
        tuple(float(y) for _, y in xy),
        role=role,
        point_labels=labels,
    )


def _better(objective: ObjectiveSpec | None) -> str:
    if objective is None:
        return "no objective"
    return "higher is better" if objective.direction == "maximize" else "lower is better"


def _not_drawn(study: StudyResult, count: int) -> tuple[str, ...]:
    running = sum(t.state in ("running", "waiting") for t in study.trials)
    notes = [f"{running} trial(s) still running or waiting, not drawn"] if running else []
    if count == 2:
        stopped = sum(t.state in ("failed", "pruned") for t in study.trials)
        if stopped:
            notes.append(f"{stopped} failed or pruned trial(s) measured nothing, not drawn")
    return tuple(notes)


def _why_empty(study: StudyResult) -> str:
    if not study.objectives:
        return "the study names no objective"
    if not study.trials:
        return "the study has no trial yet"
    return "no trial has completed with its objectives measured"
