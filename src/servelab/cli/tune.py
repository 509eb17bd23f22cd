"""`servelab tune`: search engine settings by launching and measuring (run, join, show,
kernels)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.bench.cluster import ClusterSpec
from servelab.cli.exit_codes import ExitCode, handle_errors
from servelab.cli.option_groups import OptionGroup, with_option_groups
from servelab.cli.progress import SweepView
from servelab.cli.shared_options import SharedOptions
from servelab.cli.tune_kernels import kernels
from servelab.core.errors import ConfigError, ServelabError
from servelab.core.units import parse_duration_s
from servelab.tune.results import StudyResult

if TYPE_CHECKING:
    from servelab.tune.study import WorkerConfig

__all__ = ["tune_app"]

tune_app = typer.Typer(
    name="tune",
    help="Search engine settings against an objective and SLOs by launching and measuring.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

Storage = Annotated[
    str | None,
    typer.Option(
        help="The study's database: default study.db (SQLite) in the study folder; "
        "postgresql://user@host:5432/db to share one study between workers on several hosts."
    ),
]
Trials = Annotated[
    int | None,
    typer.Option(help="Finished trials the study should hold. Default: the space file's."),
]
TimeBudget = Annotated[
    str | None,
    typer.Option(help="Start no trial after this long, e.g. 2h. Default: the space file's."),
]
# bench's and run's --out and --json name a run directory and summary.json; a study's are
# its folder and study.json.
StudyOut = Annotated[
    Path | None,
    typer.Option("--out", help="The study folder. Default: RUNS_DIR/tune-<study>/."),
]
Heartbeat = Annotated[
    str,
    typer.Option(
        help="How often a running trial's worker beats; a trial silent for twice as long is "
        "taken as its worker's death and run again."
    ),
]
NoReport = Annotated[
    bool, typer.Option("--no-report", help="Do not write report.html / report.md at the end.")
]
Json = Annotated[bool, typer.Option("--json", help="Print study.json's document on stdout.")]


@dataclass(frozen=True)
class WorkerOptions(OptionGroup):
    """How long this host works on a study, and where its trials go: `tune run`'s and
    `tune join`'s."""

    trials: Trials = None
    time_budget: TimeBudget = None
    out: StudyOut = None
    heartbeat: Heartbeat = "30s"

    def config(
        self, storage: str | None, shared: SharedOptions, cluster: ClusterSpec | None
    ) -> WorkerConfig:
        """The config of this host's worker on the study, its options checked."""
        from servelab.probe.collect import run_probe
        from servelab.tune.study import WorkerConfig

        if self.trials is not None and self.trials < 1:
            raise ConfigError("--trials must be at least 1")
        beat = parse_duration_s(self.heartbeat, what="--heartbeat")
        if not 1 <= beat <= 3600:
            raise ConfigError("--heartbeat must be between 1s and 1h")
        budget = self.time_budget
        return WorkerConfig(
            storage=storage,
            out=self.out,
            runs_root=shared.runs_dir,
            trials=self.trials,
            time_budget_s=parse_duration_s(budget, what="--time-budget") if budget else None,
            heartbeat_s=round(beat),
            telemetry_gpus=shared.telemetry_gpus(),
            command=["servelab", *sys.argv[1:]],
            probe=run_probe,
            cluster=cluster,
            price=shared.price("servelab tune"),
        )


@tune_app.command("run")
@with_option_groups
def run(
    space_file: Annotated[
        Path, typer.Argument(help="SPACE.yaml: base spec, space, workload, load, objective.")
    ],
    *,
    storage: Storage = None,
    study: Annotated[
        str | None, typer.Option(help="The study's name. Default: the space file's `study`.")
    ] = None,
    worker: WorkerOptions,
    shared: SharedOptions,
    confirm: Annotated[
        int,
        typer.Option(
            min=0,
            help="After the study, launch the best and the default configurations N times "
            "each, alternately, and report the gain's run-to-run band (median, smallest and "
            "largest best / default over the N pairs); kept in confirm.json and study.json.",
        ),
    ] = 0,
    quality_tolerance: Annotated[
        float | None,
        typer.Option(
            help="Keep only right answers: probe every trial's output quality against the "
            "default trial's and make a trial whose answers move beyond this infeasible. In "
            "nats of mean |Δlogprob| per teacher-forced token (a share of probes whose greedy "
            "answer differs, where the engine gives no logprobs); sets the space file's "
            "quality.tolerance (docs/TUNE.md, 'Only right answers').",
        ),
    ] = None,
    no_report: NoReport = False,
    json_output: Json = False,
) -> None:
    """Run a study: the base spec first, then diagnose's actions on it, then the sampler.

    Rerun the same command to continue it (finished trials are kept); start `servelab tune
    join NAME --storage URL` on other hosts to share it. Writes study.json, best.yaml,
    best-command.txt and report.html / report.md in the study folder; every trial is a run
    directory under trials/. With --cluster, each trial's load comes from client workers
    on a Ray cluster's nodes. Exit codes: 0 a best trial; 3 no trial met the constraints;
    2 bad input; 130 interrupted (finished trials kept).
    """
    from servelab.tune.space import load_space, with_quality_tolerance

    err = Console(stderr=True)
    with handle_errors(err):
        at = shared.cluster_spec()
        _quiet_optuna()
        space = load_space(space_file)
        if study is not None:
            space = space.model_copy(update={"name": _study_name(study)})
        if quality_tolerance is not None:
            space = with_quality_tolerance(space, quality_tolerance)
        config = worker.config(storage, shared, at)
        if confirm:
            from dataclasses import replace

            config = replace(config, confirm=confirm)
        from servelab.tune.study import run_study

        with _Progress(err) as view:
            result = run_study(space, config, on_event=view)
        _finish(result, _study_dir(space.name, config), err, no_report, json_output)


@tune_app.command("join")
@with_option_groups
def join(
    name: Annotated[str, typer.Argument(help="The study's name, as `tune run` created it.")],
    *,
    storage: Annotated[
        str, typer.Option(help="The database the study lives in, e.g. postgresql://…")
    ],
    worker: WorkerOptions,
    shared: SharedOptions,
    no_report: NoReport = False,
    json_output: Json = False,
) -> None:
    """Work on a study another host started: its space is read from the storage, trials run
    on this host's GPUs, their run directories go into this host's study folder."""
    err = Console(stderr=True)
    with handle_errors(err):
        _quiet_optuna()
        at = shared.cluster_spec()
        config = worker.config(storage, shared, at)
        from servelab.tune.study import join_study

        with _Progress(err) as view:
            result = join_study(_study_name(name), config, on_event=view)
        _finish(result, _study_dir(name, config), err, no_report, json_output)


@tune_app.command("show")
def show(
    study: Annotated[str, typer.Argument(help="A study folder, or a study's name.")],
    storage: Annotated[
        str | None,
        typer.Option(help="Read the study from this database instead of its study.json."),
    ] = None,
    json_output: Json = False,
) -> None:
    """The trials table, the best trial (or the Pareto set) and its spec and command."""
    out_console = Console()
    err = Console(stderr=True)
    with handle_errors(err):
        from servelab.tune.study import show_study

        result = show_study(study, storage)
        if json_output:
            out_console.print_json(result.model_dump_json(by_alias=True))
            return
        out_console.print(render_trials(result))
        for line in best_lines(result):
            out_console.print(escape(line), highlight=False, soft_wrap=True)


tune_app.command("kernels")(kernels)


def render_trials(result: StudyResult) -> Table:
    """One row per trial: its settings, its objectives, and why it ended as it did."""
    names = sorted({key for trial in result.trials for key in trial.params})
    table = Table(title=f"study {result.name}: {result.workload}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("role")
    table.add_column("state")
    for name in names:
        table.add_column(name.removeprefix("knobs."))
    for objective in result.objectives:
        table.add_column(f"{objective.label} ({objective.unit})", justify="right")
    quality = result.quality_tolerance is not None
    if quality:
        table.add_column("quality vs default", justify="right")
    table.add_column("why")
    best = set(result.best)
    for trial in result.trials:
        values = trial.values or []
        cells = [
            f"{trial.number}{'*' if trial.number in best else ''}",
            trial.role,
            trial.state if trial.feasible is not False else "infeasible",
            *(_cell(trial.params.get(name, "")) for name in names),
            *(_value(v) for v in values),
            *([""] * (len(result.objectives) - len(values))),
            *([trial.quality.cell() if trial.quality else "-"] if quality else []),
            escape(trial.reason or ""),
        ]
        table.add_row(*cells)
    return table


def best_lines(result: StudyResult) -> list[str]:
    """The answer in a few lines: the best trial, its gain, its spec and command."""
    if not result.best:
        return ["no trial met the constraints yet" if result.trials else "no trial has run yet"]
    lines: list[str] = []
    for number in result.best:
        trial = result.trial(number)
        if trial is None or not trial.values:
            continue
        measured = ", ".join(
            f"{o.label} {_value(v)} {o.unit}"
            for o, v in zip(result.objectives, trial.values, strict=True)
        )
        lines.append(f"best: trial {number}: {measured}")
    gain = result.gain_over_default()
    if gain is not None and result.default_trial is not None:
        lines.append(f"  {gain:.2f}x the default's (trial {result.default_trial})")
    lines += [f"  {check.text}" for check in result.best_noise]
    confirmation = result.confirmation
    within = [check.trial for check in result.best_noise if check.within_noise]
    if within and confirmation is None:
        lines.append(
            f"  the best is not shown to beat trial {within[0]}: one measurement of each, "
            "within noise (tune run --confirm N re-measures the best against the default)"
        )
    if confirmation is not None and confirmation.text:
        stale = result.best[:1] != [confirmation.best_trial]
        lines.append(f"  {confirmation.text}" + (" (an earlier best)" if stale else ""))
    lines += [
        f"prediction: trial {row.number}: {row.prediction.text}"
        for row in result.trials
        if row.prediction is not None
    ]
    lines += [
        f"twin: trial {row.number}: {row.twin.text(row.values[0] if row.values else None)}"
        for row in result.trials
        if row.twin is not None
    ]
    if result.best_command:
        lines.append(f"command: {shlex.join(result.best_command)}")
    return lines


class _Progress:
    """Trial lines, and each trial's sweep drawn by the bench's own view."""

    def __init__(self, err: Console) -> None:
        self.err = err
        self.sweep: SweepView | None = None

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def __call__(self, event: Any) -> None:
        from servelab.tune.trial import TrialEvent

        if isinstance(event, TrialEvent):
            self._close()
            self.err.print(escape(_trial_line(event)), highlight=False, soft_wrap=True)
            if event.outcome is None:
                self.sweep = SweepView(self.err).__enter__()
            return
        if self.sweep is not None:
            self.sweep(event)

    def _close(self) -> None:
        if self.sweep is not None:
            self.sweep.__exit__(None, None, None)
            self.sweep = None


def _trial_line(event: Any) -> str:
    if event.number < 0:
        return f"study: {event.text}"
    if event.outcome is None:
        settings = ", ".join(f"{k}={_cell(v)}" for k, v in event.params.items()) or "as given"
        said = f"; {event.text}" if event.text else ""
        return f"trial {event.number} ({event.role}): {settings}{said}"
    why = f": {event.text}" if event.text else ""
    return f"trial {event.number}: {event.outcome}{why}"


def _finish(
    result: StudyResult, study_dir: Path, err: Console, no_report: bool, json_output: bool
) -> None:
    out_console = Console()
    if json_output:
        out_console.print_json(result.model_dump_json(by_alias=True))
    else:
        out_console.print(render_trials(result))
    for line in best_lines(result):
        err.print(escape(line), highlight=False, soft_wrap=True)
    err.print(f"study: {escape(str(study_dir))}", highlight=False)
    if not no_report and result.trials:
        from servelab.report import write_study_report

        try:
            files = write_study_report(study_dir)
        except ServelabError as exc:
            err.print(escape(f"no report: {exc}"), highlight=False, soft_wrap=True)
        else:
            err.print(f"report: {escape(str(files.html))}", highlight=False)
    if not result.best:
        raise typer.Exit(int(ExitCode.SOME_FAILED))


def _quiet_optuna() -> None:
    """Optuna's own per-trial log lines repeat what the trial lines say."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _study_dir(name: str, config: Any) -> Path:
    from servelab.tune.study import default_study_dir

    return default_study_dir(name, config)


def _study_name(name: str) -> str:
    if not name or len(name) > 100 or not all(c.isalnum() or c in "._-" for c in name):
        raise ConfigError(f"study name {name!r}: use letters, digits, '.', '_' and '-'")
    return name


def _value(value: float) -> str:
    """An objective's value with the digits it needs: 125,346.8 tok/s, and a cost of
    0.0123 $/M tokens not rounded to 0.0."""
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _cell(value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
