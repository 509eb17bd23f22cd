"""The Tuning section: a study's question, its answer, every trial, and for a searched
layout which one wins and why, from study.json.

Under a quality tolerance each trial's answers against the default trial's (the verdict and
the primary metric's value) stand beside its speed in the trial table, so a faster trial
ruled out for drift shows why next to what it measured.

The answer comes first (the best trial or the Pareto set, its gain over the default spec,
the spec and its exact command), then the trial table and the plot. Where trials differ in
layout, a table puts each layout's best measurement beside the analytic model's account of
its step (all-reduces against the pipeline's bubble and sends), and one sentence built from
those numbers says which layout wins here, by how much, and whether the model agrees.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath

from servelab.core.units import GIB, KIB, MIB
from servelab.engines.base import LAYOUT_NAMES
from servelab.report.compare.verdicts import MIN_EFFECT
from servelab.report.document import (
    Block,
    Bullets,
    Code,
    Figure,
    KeyValues,
    Paragraph,
    Section,
    Table,
    Tone,
)
from servelab.report.plots import tuning_plot
from servelab.report.sections._common import sentence
from servelab.tune.results import (
    LayoutModel,
    ObjectiveSpec,
    ParamValue,
    StudyResult,
    TrialRow,
)
from servelab.tune.targets import CAPACITY

__all__ = ["layout_answer", "tuning_headline", "tuning_section"]

_STATES = ("complete", "pruned", "failed", "running", "waiting")
_BASE_LAYOUT = "the base spec's layout"
"""A trial that neither searched a layout size nor has the model's account keeps the base's."""


def tuning_section(study: StudyResult, *, notes: Sequence[str] = ()) -> Section:
    """The study as one section: question, answer, trials (with the plot), layouts; `notes`
    are the report's own (a trial's run directory it could not read)."""
    layouts = _layouts(study)
    trials = _trials(study)
    if len(layouts) == 1:  # nothing to compare (one GPU: tp=1 only): a line, not a table
        trials.append(Paragraph(_one_layout(layouts[0])))
    subsections = [
        Section("tuning-question", "Question", _question(study)),
        Section("tuning-answer", "Answer", _answer(study)),
        Section("tuning-trials", "Trials", trials),
    ]
    if len(layouts) > 1:
        subsections.append(Section("tuning-layout", "Layout", _layout_blocks(study, layouts)))
    blocks: list[Block] = [Paragraph(_summary(study))]
    everything = [*study.notes, *notes]
    if everything:
        blocks.append(Bullets([("plain", note, []) for note in dict.fromkeys(everything)]))
    return Section("tuning", "Tuning", blocks, subsections)


def tuning_headline(study: StudyResult) -> list[tuple[Tone, str]]:
    """The study's answer in a line or two, for the top of the report."""
    best = [t for n in study.best if (t := study.trial(n)) is not None]
    if not best:
        return [("bad", f"Tuning: {_summary(study)} No feasible trial yet, so no best spec.")]
    if len(study.objectives) == 1:
        line = f"Tuning: trial {best[0].number} is the best of {len(study.trials)}: " + _gain(
            study, best[0]
        )
    else:
        names = " and ".join(o.label for o in study.objectives)
        line = (
            f"Tuning: the Pareto set of {names} is trial(s) "
            f"{', '.join(str(t.number) for t in best)} of {len(study.trials)}."
        )
    lines: list[tuple[Tone, str]] = [("good", sentence(line))]
    answer = layout_answer(study)
    if answer is not None:
        lines.append(("info", answer))
    return lines


def layout_answer(study: StudyResult) -> str | None:
    """'tp=4,pp=2 beats tp=8 by 1.30x here (...); the model: ...', from the measured values
    and the model's numbers; None when the study did not search layouts or every trial ran
    the same one."""
    layouts = _layouts(study)
    if len(layouts) < 2 or not study.objectives:
        return None
    objective = study.objectives[0]
    ranked = sorted(
        (lay for lay in layouts if lay.value is not None),
        key=lambda lay: _sign(objective) * (lay.value or 0.0),
        reverse=True,
    )
    if not ranked:
        return f"No layout was measured yet ({', '.join(lay.name for lay in layouts)})."
    win = ranked[0]
    if len(ranked) == 1:
        others = [lay.name for lay in layouts if lay is not win]
        why = f"; not measured: {', '.join(others)}" if others else ""
        return f"Only {win.name} was measured here{why}."
    lose = ranked[1]
    w, lo = win.value or 0.0, lose.value or 0.0
    measured = f"{study.workload}; {objective.label}: {_num(w)} against {_num(lo)} {objective.unit}"
    ratio = _factor(w, lo, objective)
    if ratio is None:  # a value of 0 or below: no factor to give
        text = f"{win.name} beats {lose.name} here ({measured})"
    elif ratio - 1 < MIN_EFFECT:
        text = (
            f"{win.name} and {lose.name} measure within {MIN_EFFECT:.0%} of each other here "
            f"({measured}): neither layout wins"
        )
    else:
        text = f"{win.name} beats {lose.name} by {ratio:.2f}x here ({measured})"
    says = _model_says(win, lose, objective.metric)
    return f"{text}; {says}."  # not sentence(): 'tp=8' stays lower case


@dataclass(frozen=True)
class _Layout:
    """The trials of one layout: its best measured trial and the model's account of it."""

    name: str
    trials: tuple[TrialRow, ...]
    best: TrialRow | None
    value: float | None
    """The best trial's first objective."""
    model: LayoutModel | None


def _summary(study: StudyResult) -> str:
    states = {state: sum(t.state == state for t in study.trials) for state in _STATES}
    counts = ", ".join(f"{n} {state}" for state, n in states.items() if n)
    return f"Study {study.name}: {len(study.trials)} trials ({counts or 'none yet'})."


def _answer(study: StudyResult) -> list[Block]:
    best = [t for n in study.best if (t := study.trial(n)) is not None]
    if not best:
        return [Paragraph("No feasible trial yet: the study has no best spec.", "bad")]
    blocks: list[Block] = []
    if len(study.objectives) == 1:
        trial = best[0]
        text = f"Best: trial {trial.number} ({trial.role}): {_gain(study, trial)}"
        blocks.append(Paragraph(sentence(text), "good"))
        blocks += _noise(study)
    else:
        numbers = ", ".join(str(t.number) for t in best)
        blocks.append(
            Paragraph(
                f"The Pareto set: trials {numbers}, the feasible trials no other feasible trial "
                "beats on every objective. Each against the default:",
                "good",
            )
        )
        blocks.append(_pareto_table(study, best))
    changes = _changes(study, best[0])
    if changes:
        blocks += [
            Paragraph(f"Trial {best[0].number} against the default spec:"),
            Bullets([("plain", change, []) for change in changes]),
        ]
    spec = study.best_spec_yaml or best[0].spec_yaml
    if spec:
        blocks += [
            Paragraph(f"The best spec (best.yaml, trial {best[0].number}):"),
            Code(spec, "yaml"),
        ]
    command = study.best_command or best[0].command
    if command:
        blocks += [Paragraph("Its launch command, exactly:"), Code(shlex.join(command), "console")]
    return blocks


def _noise(study: StudyResult) -> list[Block]:
    """Whether the best is better than the runner-up and the default, or only luckier: each
    check in its noise band, and the gain re-measured when `--confirm` ran."""
    lines: list[tuple[Tone, str, list[str]]] = [
        ("warn" if check.within_noise else "plain", sentence(check.text), [])
        for check in study.best_noise
    ]
    if study.confirmation is not None:
        tone: Tone = "good" if study.confirmation.confirmed else "warn"
        lines.append((tone, sentence(study.confirmation.text), []))
    for row in study.trials:
        if row.prediction is not None:
            mark: Tone = "good" if row.prediction.verdict == "inside" else "warn"
            lines.append((mark, sentence(f"trial {row.number}: {row.prediction.text}"), []))
        if row.twin is not None:
            measured = row.values[0] if row.values else None
            said: Tone = (
                "good" if row.twin.verdict(measured) in ("inside", "within noise") else "warn"
            )
            lines.append((said, sentence(f"trial {row.number}: {row.twin.text(measured)}"), []))
    if not lines:
        return []
    return [Paragraph("Is the best better, or luckier?"), Bullets(lines)]


def _gain(study: StudyResult, best: TrialRow) -> str:
    """'total_throughput at 64 = 1,300 tok/s, 1.30x the default's 1,000 (trial 0, +30%)'."""
    objective = study.objectives[0]
    text = f"{objective.label} = {_objective(best, 0)} {objective.unit}"
    base = study.trial(study.default_trial) if study.default_trial is not None else None
    if base is None:
        return text + "; the study has no default trial to compare with"
    if base.number == best.number:
        return text + ": the default spec itself, no trial beat it"
    ratio = study.gain_over_default()
    if ratio is None or not base.values:
        return text + f"; the default (trial {base.number}) measured nothing to compare with"
    return (
        f"{text}, {ratio:.2f}x the default's {_num(base.values[0])} "
        f"(trial {base.number}, {ratio - 1:+.0%})"
    )


def _ratio(trial: TrialRow, base: TrialRow | None, index: int) -> float | None:
    if base is None or not trial.values or not base.values or base.values[index] == 0:
        return None
    return trial.values[index] / base.values[index]


def _pareto_table(study: StudyResult, best: list[TrialRow]) -> Table:
    base = study.trial(study.default_trial) if study.default_trial is not None else None
    header = ["trial", *(f"{o.label} ({o.unit})" for o in study.objectives)]
    header += [f"vs default: {o.label}" for o in study.objectives]
    rows = []
    for trial in best:
        values = [_objective(trial, i) for i in range(len(study.objectives))]
        ratios = [_ratio(trial, base, i) for i in range(len(study.objectives))]
        rows.append(
            [str(trial.number), *values, *("-" if r is None else f"{r:.2f}x" for r in ratios)]
        )
    return Table(header, rows, right=frozenset(range(1, len(header))))


def _changes(study: StudyResult, trial: TrialRow) -> list[str]:
    """What the trial sets that the default does not: 'max_running_requests: 64 → 256'."""
    base = study.trial(study.default_trial) if study.default_trial is not None else None
    if base is None or base.number == trial.number:
        return []
    return [
        f"{name}: {_param(base.params.get(name))} → {_param(value)}"
        for name, value in trial.params.items()
        if base.params.get(name) != value
    ]


def _question(study: StudyResult) -> list[Block]:
    facts = [
        ("engine", study.engine),
        ("workload", study.workload),
        ("sampler", study.sampler),
        ("storage", study.storage),
        ("search space", study.space_file or "not recorded"),
        ("default trial", "none" if study.default_trial is None else str(study.default_trial)),
    ]
    rows = [[o.metric, o.direction, _read_at(o), o.unit] for o in study.objectives]
    blocks: list[Block] = [
        KeyValues(facts),
        Table(["objective", "direction", "read at load", "unit"], rows, caption="Objectives"),
    ]
    if study.constraints:
        blocks += [
            Paragraph("A trial is feasible when it meets every constraint:"),
            Bullets([("plain", c, []) for c in study.constraints]),
        ]
    else:
        blocks.append(Paragraph("No constraint: every measured trial is feasible."))
    if study.quality_tolerance is not None:
        blocks.append(Paragraph(_tolerance_text(study.quality_tolerance)))
    return blocks


def _tolerance_text(tolerance: float) -> str:
    return (
        f"Only right answers: every trial's quality probe is compared with the default "
        f"trial's. A trial is infeasible when its answers are broken, when they drift with "
        f"the bootstrap's lower end over both the floor and the tolerance of {tolerance:g} "
        "(nats of mean |Δlogprob| per teacher-forced token, or a share of diverging probes "
        "where the engine gives no logprobs), or when its greedy answers drift while its "
        "logprobs stay within the floor (docs/TUNE.md, 'Only right answers')."
    )


def _trials(study: StudyResult) -> list[Block]:
    params = list(dict.fromkeys(name for t in study.trials for name in t.params))
    shown = {name for o in study.objectives for name in _objective_keys(o)}
    metrics = [
        m for m in dict.fromkeys(m for t in study.trials for m in t.metrics) if m not in shown
    ]
    quality = study.quality_tolerance is not None
    header = ["trial", "role", "state", *params]
    header += [f"{o.label} ({o.unit})" for o in study.objectives]
    header += ["quality vs default"] if quality else []
    header += [*metrics, "feasible", "run"]
    first_number = 3 + len(params)
    best = set(study.best)
    mark = "best" if len(study.objectives) == 1 else "Pareto"
    rows, tones = [], []
    reasons: list[tuple[Tone, str, list[str]]] = []
    for trial in sorted(study.trials, key=lambda t: t.number):
        why = "; ".join(p for p in (trial.reason, trial.signature) if p)
        if why:
            reasons.append((_tone(trial, best), f"Trial {trial.number} ({trial.state}): {why}", []))
        rows.append(
            [
                f"{trial.number} ({mark})" if trial.number in best else str(trial.number),
                trial.role,
                trial.state,
                *(_param(trial.params[p]) if p in trial.params else "" for p in params),
                *(_objective(trial, i) for i in range(len(study.objectives))),
                *([trial.quality.cell() if trial.quality else "-"] if quality else []),
                *(_num(trial.metrics.get(m)) for m in metrics),
                {True: "yes", False: "no", None: "-"}[trial.feasible],
                PurePath(trial.run_dir).name if trial.run_dir else "-",
            ]
        )
        tones.append(_tone(trial, best))
    numbers = len(study.objectives) + int(quality) + len(metrics)
    right = frozenset(range(first_number, first_number + numbers))
    blocks: list[Block] = [Table(header, rows, tones=tones, right=right)]
    if reasons:  # below the table: a column of long sentences, mostly empty, widens it twice
        blocks.append(Bullets(reasons))
    plot = tuning_plot(study)
    if plot.missing is None:
        blocks.append(Figure(plot))
    else:
        blocks.append(Bullets([("plain", f"{plot.title}: not drawn, {plot.missing}", [])]))
    return blocks


def _read_at(objective: ObjectiveSpec) -> str:
    """Where the objective is read: a load, the highest, or (capacity) found by the search."""
    if objective.at is not None:
        return f"{objective.at:g}"
    return "the load the search finds" if objective.metric == CAPACITY else "the highest level"


def _objective_keys(objective: ObjectiveSpec) -> tuple[str, ...]:
    """The names a trial's metrics may give the objective: its metric, its label, and the
    tuner's `metric@load` key; its own column shows it, so none is repeated."""
    at = () if objective.at is None else (f"{objective.metric}@{objective.at:g}",)
    return (objective.metric, objective.label, *at)


def _tone(trial: TrialRow, best: set[int]) -> Tone:
    if trial.number in best:
        return "good"
    if trial.state == "failed":
        return "bad"
    if trial.state == "pruned" or trial.feasible is False:
        return "warn"
    return "plain"


def _layouts(study: StudyResult) -> list[_Layout]:
    """Trials grouped by layout, when the study searched one (layout params or a model)."""
    if not any(t.model is not None or _layout_params(t) for t in study.trials):
        return []
    groups: dict[str, list[TrialRow]] = {}
    for trial in sorted(study.trials, key=lambda t: t.number):
        groups.setdefault(_layout_name(trial), []).append(trial)
    objective = study.objectives[0] if study.objectives else None
    layouts = []
    for name, trials in groups.items():
        measured = [
            t for t in trials if t.state == "complete" and t.values and t.feasible is not False
        ]
        best = max(measured, key=lambda t: _sign(objective) * _value(t), default=None)
        model = best.model if best is not None else None
        model = model or next((t.model for t in trials if t.model is not None), None)
        value = _value(best) if best is not None else None
        layouts.append(_Layout(name, tuple(trials), best, value, model))
    return layouts


def _one_layout(layout: _Layout) -> str:
    """The Layout section of a study that ran one layout, in one line."""
    return f"Every trial ran one layout, {layout.name}: no layout to compare."


def _layout_params(trial: TrialRow) -> dict[str, ParamValue]:
    """The searched layout sizes, by name: `tp`, `layout.tp` and `engine.tp` all give tp."""
    found: dict[str, ParamValue] = {}
    for path, value in trial.params.items():
        name = path.rsplit(".", 1)[-1]
        if name in LAYOUT_NAMES:
            found[name] = value
    return found


def _layout_name(trial: TrialRow) -> str:
    """'tp=4,pp=2': the model's tp and pp over the params', sizes of 1 left out but one."""
    sizes = _layout_params(trial)
    if trial.model is not None:
        sizes |= {"tp": trial.model.tp, "pp": trial.model.pp}
    if not sizes:
        return _BASE_LAYOUT
    named = [f"{n}={sizes[n]}" for n in LAYOUT_NAMES if n in sizes and sizes[n] != 1]
    return ",".join(named) or "tp=1"


def _layout_blocks(study: StudyResult, layouts: list[_Layout]) -> list[Block]:
    objective = study.objectives[0] if study.objectives else None
    measured_header = f"best {objective.label} ({objective.unit})" if objective else "best"
    metric = objective.metric if objective else "total_throughput"
    header = [
        "layout",
        "trials",
        measured_header,
        "model step ms",
        "all-reduces x bytes",
        "all-reduce ms",
        "pipeline send ms",
        "bubble",
        "prefill ms per cycle",
        f"model {metric}",
        "model's reason",
    ]
    rows = []
    for lay in layouts:
        m = lay.model
        measured = (
            f"{_num(lay.value)} (trial {lay.best.number})"
            if lay.best is not None
            else ("does not fit" if m is not None and not m.fits else "not measured")
        )
        model_cells = (
            [
                f"{m.step_ms:.3g}",
                f"{m.allreduces} x {_bytes(m.allreduce_bytes)}",
                f"{m.allreduce_ms:.3g}",
                f"{m.pp_send_ms:.3g}",
                f"{m.pp_bubble_fraction:.0%}",
                f"{m.prefill_ms:,.3g}",
                f"{m.predicted(metric):,.0f}",
                m.reason,
            ]
            if m is not None
            else ["-"] * 7 + ["the model did not account for this layout"]
        )
        rows.append(
            [lay.name, ", ".join(str(t.number) for t in lay.trials), measured, *model_cells]
        )
    table = Table(
        header,
        rows,
        caption="Each layout's best feasible measurement beside the model's step at that load",
        right=frozenset(range(2, 10)),
    )
    blocks: list[Block] = [table]
    answer = layout_answer(study)
    if answer is not None:
        blocks.append(Paragraph(answer, "info"))
    return blocks


def _model_says(win: _Layout, lose: _Layout, metric: str) -> str:
    """The model's account of the two layouts and whether it ranks them as measured."""
    if win.model is None or lose.model is None:
        return "the model did not account for " + (
            "either layout" if win.model is lose.model else (lose if win.model else win).name
        )
    a, b = win.model, lose.model
    pa, pb = a.predicted(metric), b.predicted(metric)
    if pb == pa:
        verdict = "level, as it predicts them"
    else:
        agrees = pa > pb
        verdict = "as measured" if agrees else "the opposite of what was measured"
    return (
        f"the model: {win.name} {_step(a)}; {lose.name} {_step(b)}; it predicts "
        f"{pa:,.0f} against {pb:,.0f} tok/s ({pa / pb:.2f}x), {verdict}"
        if pb
        else f"the model: {win.name} {_step(a)}; {lose.name} {_step(b)}"
    )


def _step(m: LayoutModel) -> str:
    """'spends 4.6 ms of its 25 ms step in 78 all-reduces of 1.5 MiB, plus 0.4 ms of
    pipeline sends and a 12% bubble'."""
    text = (
        f"spends {m.allreduce_ms:.3g} ms of its {m.step_ms:.3g} ms step in {m.allreduces} "
        f"all-reduces of {_bytes(m.allreduce_bytes)}"
    )
    if m.pp > 1:
        text += f", plus {m.pp_send_ms:.3g} ms of pipeline sends and a "
        text += f"{m.pp_bubble_fraction:.0%} bubble"
    return text


def _factor(a: float, b: float, objective: ObjectiveSpec) -> float | None:
    """How many times better a is than b (>= 1 when a is the better)."""
    if a <= 0 or b <= 0:
        return None
    return a / b if objective.direction == "maximize" else b / a


def _sign(objective: ObjectiveSpec | None) -> float:
    return -1.0 if objective is not None and objective.direction == "minimize" else 1.0


def _value(trial: TrialRow) -> float:
    """The first objective of a measured trial."""
    return trial.values[0] if trial.values else 0.0


def _objective(trial: TrialRow, index: int) -> str:
    if trial.values is None or len(trial.values) <= index:
        return "-"
    return _num(trial.values[index])


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _param(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _bytes(size: float) -> str:
    for unit, factor in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size:.0f} B"
