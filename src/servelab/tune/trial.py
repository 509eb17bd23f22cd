"""One trial: the spec the sampler chose, launched and swept into its own run directory.

The run directory is a normal one (summary.json, requests.jsonl, engine.log, diagnosis.json),
so `servelab report` and `servelab diagnose` read a trial like any run. What a trial ends
as is kept in its user attributes, which the study document is rebuilt from:

- complete: every objective measured; constraints recorded with `trial.set_constraint`,
  the study's quality tolerance among them (tune.quality: the trial's answers against the
  default trial's, its reason where it is not met);
- pruned: a layout the machine or the model rules out (never launched), or a sweep stopped
  early because the objective, at its own level, was far behind the best feasible trial's
  (the levels after it were not run), or a capacity search that failed under the best
  trial's capacity (tune.capacity);
- failed: the engine would not start or died (its reason and the log signature that
  explains it), or an objective's level has no measurement (every request there failed).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from servelab.bench.cluster import ClusterSpec
from servelab.bench.cost import resolve_price
from servelab.bench.cost_results import HourlyPrice, Price
from servelab.bench.events import BenchEvent
from servelab.bench.quality.plan import QualityPlan
from servelab.bench.quality.results import QUALITY_FILE, load_quality
from servelab.bench.results import BenchSummary, LevelSummary, SweepStop
from servelab.bench.session import BenchConfig
from servelab.bench.trial import bench_engine
from servelab.core.errors import (
    ConfigError,
    EndpointError,
    EngineDied,
    EngineLaunchError,
    EngineSetupError,
)
from servelab.core.redact import redact_argv, scrub
from servelab.core.severity import Severity
from servelab.diagnose import DiagnoseOptions, Diagnosis, diagnose_run
from servelab.engines.base import EngineSpec
from servelab.engines.signatures import LogEvent, scan_log
from servelab.engines.spec import spec_yaml
from servelab.probe.report import ProbeReport
from servelab.store import SUMMARY_FILE, RunDir
from servelab.tune.capacity import capacity_plan, give_up_below
from servelab.tune.params import apply_params
from servelab.tune.prune import available_gpus, check_fit, layout_model
from servelab.tune.quality import (
    QUALITY_MET,
    QUALITY_VIOLATED,
    constraint_text,
    judge_default,
    judge_trial,
    not_judged,
)
from servelab.tune.results import ObjectiveSpec, TrialQuality, TwinForecast
from servelab.tune.space import SearchSpace
from servelab.tune.targets import CAPACITY, COST, Constraint, level_at, read_metric
from servelab.tune.twin_forecast import (
    FinishedTrial,
    forecast_trial,
    surely_violated,
    with_measured_band,
)

__all__ = [
    "TrialContext",
    "TrialEvent",
    "TrialFailed",
    "finished_trials",
    "read_objective",
    "run_trial",
    "sweep_spec",
    "trial_dir",
    "twin_forecast",
]

OUTCOME = "outcome"
"""User attribute every trial that ended on its own carries (a stale one has none)."""
TRIALS_DIR = "trials"
_KEPT = frozenset({"role", "action", "applies", "ranked"})
"""What an enqueued trial was seeded with: who asked for it, and the finding it applies."""


class TrialFailed(Exception):
    """The trial's engine would not start or died: a failed trial, never a failed study."""

    def __init__(self, message: str, *, signature: str | None = None) -> None:
        super().__init__(message)
        self.signature = signature
        """The engine log signature that explains it, where one matched."""


@dataclass(frozen=True, slots=True)
class TrialEvent:
    """A trial begins (`row` None) or ends; for the terminal's progress lines."""

    number: int
    role: str
    params: dict[str, Any]
    outcome: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one worker shares."""

    space: SearchSpace
    study_dir: Path
    probe: ProbeReport | None
    probe_path: Path | None
    runs_root: Path | None = None
    telemetry_gpus: list[int] | None = None
    command: list[str] | None = None
    cluster: ClusterSpec | None = None
    """Each trial's client workers on a Ray cluster's nodes, joined anew per trial."""
    price: HourlyPrice | None = None
    """What the deployment costs an hour; a GPU price times each trial's own GPUs."""
    on_event: Callable[[BenchEvent | TrialEvent], None] = lambda _e: None


def trial_dir(study_dir: Path, number: int) -> Path:
    return study_dir / TRIALS_DIR / f"{number:03d}"


def run_trial(trial: optuna.Trial, ctx: TrialContext) -> list[float]:
    """Optuna's objective: the trial's objective values, or TrialPruned / TrialFailed."""
    space = ctx.space
    role = _role(trial)
    for key, value in trial.user_attrs.items():
        if key not in _KEPT and value is not None:
            trial.set_user_attr(key, None)  # a retry starts with its dead original's attrs
    trial.set_user_attr("role", role)
    trial.set_user_attr("host", socket.gethostname())
    params = {p.path: p.suggest(trial) for p in space.params}
    finished = finished_trials(trial.study, ctx)
    forecast = twin_forecast(ctx, params, finished, space.objectives[0])
    if forecast is not None:
        trial.set_user_attr("twin", forecast.model_dump())
    said = forecast.text(None) if forecast is not None else None
    ctx.on_event(TrialEvent(trial.number, role, params, text=said))
    started = time.monotonic()
    try:
        _prune_by_twin(ctx, params, finished)
        values = _measure(trial, ctx, params)
    except optuna.TrialPruned as exc:
        _end(trial, ctx, "pruned", str(exc), started)
        raise
    except TrialFailed as exc:
        _end(trial, ctx, "failed", str(exc), started)
        raise
    if forecast is not None and values:
        _band_the_forecast(trial, ctx, forecast, finished, values[0])
    _end(trial, ctx, "complete", trial.user_attrs.get("reason"), started)
    return values


def _band_the_forecast(
    trial: optuna.Trial,
    ctx: TrialContext,
    forecast: TwinForecast,
    finished: list[FinishedTrial],
    measured: float,
) -> None:
    """The twin's forecast with what the trial measured's noise band beside it."""
    source = next((f.run_dir for f in finished if f.number == forecast.from_trial), None)
    run_dir = trial.user_attrs.get("run_dir")
    if source is None or run_dir is None or trial.user_attrs.get("same_as") is not None:
        return
    banded = with_measured_band(forecast, source, ctx.study_dir / str(run_dir), measured)
    trial.set_user_attr("twin", banded.model_dump())


def finished_trials(study: optuna.Study, ctx: TrialContext) -> list[FinishedTrial]:
    """The study's complete trials with a run the twin can be fitted on."""
    out = [
        FinishedTrial(t.number, dict(t.params), ctx.study_dir / str(t.user_attrs["run_dir"]))
        for t in study.get_trials(deepcopy=False)
        if t.state is optuna.trial.TrialState.COMPLETE
        and t.user_attrs.get("run_dir")
        and t.user_attrs.get("same_as") is None
    ]
    return [f for f in out if (f.run_dir / SUMMARY_FILE).is_file()]


def twin_forecast(
    ctx: TrialContext,
    params: dict[str, Any],
    finished: list[FinishedTrial],
    target: ObjectiveSpec | Constraint,
) -> TwinForecast | None:
    """The target predicted by the twin of the nearest finished trial that differs from
    this one only in limits the twin replays; None where there is none."""
    if not finished:
        return None
    try:
        spec = apply_params(ctx.space.base, params)
    except ConfigError:
        return None
    return forecast_trial(params, finished, target, _diagnose_options(spec, ctx.probe_path))


def _prune_by_twin(
    ctx: TrialContext, params: dict[str, Any], finished: list[FinishedTrial]
) -> None:
    """A trial the twin predicts cannot meet a constraint at any of its draws is not run
    (the twin never prunes on anything it does not replay: output quality, a layout)."""
    for constraint in ctx.space.constraints:
        forecast = twin_forecast(ctx, params, finished, constraint)
        if forecast is not None and surely_violated(constraint, forecast):
            raise optuna.TrialPruned(f"{forecast.text(None)}: all of it outside {constraint.text}")


def _measure(trial: optuna.Trial, ctx: TrialContext, params: dict[str, Any]) -> list[float]:
    space = ctx.space
    try:
        spec = apply_params(space.base, params)
    except ConfigError as exc:
        raise optuna.TrialPruned(f"not a valid spec: {exc}") from None
    trial.set_user_attr("spec_yaml", spec_yaml(spec))
    same = _same_settings(trial, params)
    if same is not None:
        return _copy(trial, same)
    fit = check_fit(spec, ctx.probe, available_gpus(spec, ctx.probe, space.gpus))
    if fit.deployment is not None or not fit.ok:
        _record_model(trial, ctx, spec, fit)
    if not fit.ok:
        raise optuna.TrialPruned(fit.reason)
    run_path = trial_dir(ctx.study_dir, trial.number)
    # Relative to the study folder: each host's folder holds the trials it ran.
    trial.set_user_attr("run_dir", str(run_path.relative_to(ctx.study_dir)))
    reference = _quality_reference(trial, ctx)
    summary = _sweep(trial, ctx, spec, run_path, reference)
    command = (summary.engine or {}).get("command")
    if isinstance(command, list):
        trial.set_user_attr("command", redact_argv([str(arg) for arg in command]))
    if ctx.probe is not None and run_path.is_dir():
        RunDir(run_path).write_probe(ctx.probe)
    levels = {
        f"{v:g}": read_metric(summary, space.objectives[0].metric, v, attainment=space.attainment)
        for v in space.load.levels
    }
    trial.set_user_attr("levels", levels)
    diagnosis = _diagnose(run_path, spec, ctx)
    if diagnosis is not None and diagnosis.findings:
        trial.set_user_attr("finding", diagnosis.findings[0].title)
    if summary.sweep_stop is not None and summary.sweep_stop.reason == "behind":
        raise optuna.TrialPruned(summary.sweep_stop.explanation)
    metrics = _metrics(summary, space)
    trial.set_user_attr("metrics", metrics)
    for constraint in space.constraints:
        measured = metrics.get(_key(constraint.metric, constraint.at))
        trial.set_constraint(constraint.text, constraint.violation(measured))
    if space.quality is not None:
        judged = _judge_quality(trial, space.quality.tolerance, run_path, reference)
        trial.set_user_attr("quality", judged.model_dump(mode="json"))
        met = QUALITY_MET if judged.accepted else QUALITY_VIOLATED
        trial.set_constraint(constraint_text(space.quality), met)
        if not judged.accepted:
            trial.set_user_attr("reason", judged.reason)
    values = [metrics.get(_key(o.metric, o.at)) for o in space.objectives]
    missing = [o.label for o, v in zip(space.objectives, values, strict=True) if v is None]
    if missing:
        raise TrialFailed(
            f"nothing measured for {', '.join(missing)}: {_why_missing(summary, space)}"
        )
    return [float(v) for v in values if v is not None]


def _sweep(
    trial: optuna.Trial,
    ctx: TrialContext,
    spec: EngineSpec,
    run_path: Path,
    reference: tuple[int, Path] | None,
) -> BenchSummary:
    name = f"{ctx.space.name}-trial-{trial.number:03d}"
    give_up = None
    if ctx.space.objectives[0].metric == CAPACITY:
        give_up = give_up_below(ctx.space, _best_feasible(trial.study, maximize=True))
    wanted = ctx.space.quality
    quality = (
        QualityPlan(
            prompts=wanted.prompts,
            seed=wanted.seed,
            reference=reference[1] if reference is not None else None,
        )
        if wanted is not None
        else None
    )
    try:
        return sweep_spec(
            ctx,
            spec,
            run_path,
            name=name,
            stop_early=_early_stop(trial, ctx),
            give_up=give_up,
            quality=quality,
        )
    except TrialFailed as exc:
        if exc.signature is not None:
            trial.set_user_attr("signature", exc.signature)
        raise


def sweep_spec(
    ctx: TrialContext,
    spec: EngineSpec,
    run_path: Path,
    *,
    name: str,
    stop_early: Callable[[Sequence[LevelSummary]], SweepStop | None] | None = None,
    give_up: float | None = None,
    quality: QualityPlan | None = None,
) -> BenchSummary:
    """Launch `spec` and run the study's load on it into `run_path`, as every trial does;
    an engine that does not start or dies is TrialFailed (with its log signature).
    `give_up`: a capacity search ends once a load at or under it fails (tune.capacity);
    `quality`: the quality probe beside the sweep (a study with a quality tolerance)."""
    config = _bench_config(
        ctx, spec, run_path, name=name, stop_early=stop_early, give_up=give_up, quality=quality
    )
    try:
        outcome = bench_engine(spec, config, on_event=ctx.on_event)
    except EngineLaunchError as exc:
        event = _signature(run_path, spec.engine)
        detail = f" ({event.signature}: {event.text.strip()})" if event is not None else ""
        raise TrialFailed(
            f"the engine did not start: {exc}{detail}",
            signature=event.signature if event is not None else None,
        ) from None
    except EngineDied as exc:
        event = _signature(run_path, spec.engine)
        raise TrialFailed(
            f"the engine died: {exc}", signature=event.signature if event is not None else None
        ) from None
    except (EngineSetupError, EndpointError) as exc:
        raise TrialFailed(str(exc)) from None
    return outcome.summary


def _bench_config(
    ctx: TrialContext,
    spec: EngineSpec,
    run_path: Path,
    *,
    name: str,
    stop_early: Callable[[Sequence[LevelSummary]], SweepStop | None] | None,
    give_up: float | None = None,
    quality: QualityPlan | None = None,
) -> BenchConfig:
    space = ctx.space
    load = space.load
    return BenchConfig(
        url="http://127.0.0.1",
        mode=load.mode,
        levels=list(load.levels),
        num_requests=load.num_requests,
        duration_s=load.duration_s,
        warmup=load.warmup,
        stream=load.stream,
        workload=space.workload,
        slo_ms=space.slo_ms,
        name=name,
        out=run_path,
        runs_root=ctx.runs_root,
        command=ctx.command or [],
        gpus=list(ctx.telemetry_gpus or []),
        stop_early=stop_early,
        capacity=capacity_plan(space, give_up=give_up),
        cluster=ctx.cluster,
        price=_trial_price(ctx, spec),
        quality=quality,
    )


def _quality_reference(trial: optuna.Trial, ctx: TrialContext) -> tuple[int, Path] | None:
    """Under a quality tolerance, the default trial's number and run directory: its pass is
    every other trial's reference. None for the default itself, and where the default has
    not completed or its quality.json is not in this host's study folder."""
    if ctx.space.quality is None or trial.user_attrs.get("role") == "default":
        return None
    for other in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        run_dir = other.user_attrs.get("run_dir")
        if (
            other.user_attrs.get("role") == "default"
            and run_dir
            and not other.user_attrs.get("same_as")
        ):
            path = ctx.study_dir / str(run_dir)
            return (other.number, path) if (path / QUALITY_FILE).is_file() else None
    return None


def _judge_quality(
    trial: optuna.Trial, tolerance: float, run_path: Path, reference: tuple[int, Path] | None
) -> TrialQuality:
    """The trial's answers by tune.quality's rule: the default on its own, any other
    against the default's pass."""
    try:
        result = load_quality(run_path) if run_path.is_dir() else None
        if trial.user_attrs.get("role") == "default":
            return judge_default(result)
        if reference is None:
            return not_judged(
                None,
                "no reference: the default trial had not completed when this one began, or "
                "its quality.json is not in this host's study folder",
            )
        number, path = reference
        return judge_trial(result, load_quality(path), tolerance=tolerance, reference_trial=number)
    except ConfigError as exc:
        return not_judged(reference[0] if reference else None, str(exc))


def _trial_price(ctx: TrialContext, spec: EngineSpec) -> Price | None:
    """The study's price for one trial: a GPU price times the GPUs the trial's spec holds."""
    if ctx.price is None:
        return None
    gpus = list(ctx.telemetry_gpus or [])
    return resolve_price(ctx.price, spec=spec, gpus=gpus, probe=ctx.probe)


def _early_stop(
    trial: optuna.Trial, ctx: TrialContext
) -> Callable[[Sequence[LevelSummary]], SweepStop | None] | None:
    """After each level: end the sweep where every request of the level failed (the trial
    then fails: it measured nothing there), or where the objective's own level is measured
    and reaches less than `early_stop` of the best feasible trial's objective, so the levels
    after it are not run (pruned). Like with like: the same metric at the same level as the
    objective, never a first level standing in for the highest. Two objectives have no single
    bar (one trial may lose on the first and win on the second), and a cost is not a field
    of the level: no early stop then."""
    space = ctx.space
    levels = space.load.levels
    if space.early_stop <= 0 or len(levels) < 2:
        return None
    objective = space.objectives[0]
    at = objective.at if objective.at is not None else max(levels)
    maximize = objective.direction == "maximize"
    has_later = any(math.isclose(v, at) for v in levels[:-1])
    bar = (
        _best_feasible(trial.study, maximize=maximize)
        if len(space.objectives) == 1 and has_later and objective.metric != COST
        else None
    )

    def stop(done: Sequence[LevelSummary]) -> SweepStop | None:
        last = done[-1]
        if not last.completed and (last.failed or 0) > 0:
            return SweepStop(
                reason="errors",
                level=last.level,
                explanation=f"every request failed at level {last.level} ({last.failed} failed)",
            )
        if bar is None or level_at([last], at) is None:
            return None
        value = getattr(last, objective.metric, None)
        if not isinstance(value, int | float) or not math.isfinite(value):
            return None
        behind = value < space.early_stop * bar if maximize else value * space.early_stop > bar
        if not behind:
            return None
        side = "under" if maximize else "over"
        share = space.early_stop if maximize else 1 / space.early_stop
        return SweepStop(
            reason="behind",
            level=last.level,
            explanation=f"stopped early: {objective.metric} at {at:g} is {value:,.4g}, "
            f"{side} {share:.0%} of the best feasible trial's {bar:,.4g}",
        )

    return stop


def _best_feasible(study: optuna.Study, *, maximize: bool) -> float | None:
    """The best first objective among complete trials that met every constraint."""
    seen = [
        float(t.values[0])
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.values
        and math.isfinite(t.values[0])
        and all(v <= 0 for v in (t.constraints or {}).values())
    ]
    if not seen:
        return None
    return max(seen) if maximize else min(seen)


def _metrics(summary: BenchSummary, space: SearchSpace) -> dict[str, float | None]:
    """Each objective and constraint as measured; without a level, a constraint of a cost
    study is read where the cost is, at the cheapest level meeting the SLO."""
    wanted = [(o.metric, o.at) for o in space.objectives]
    wanted += [(c.metric, c.at) for c in space.constraints]
    cheapest = _by_cost(space)
    return {
        _key(metric, at): read_metric(
            summary, metric, at, attainment=space.attainment, cost_level=cheapest
        )
        for metric, at in wanted
    }


def _by_cost(space: SearchSpace) -> bool:
    """Whether the first objective is `cost` read at the cheapest level meeting the SLO."""
    first = space.objectives[0]
    return first.metric == COST and first.at is None


def read_objective(summary: BenchSummary, space: SearchSpace) -> tuple[float | None, str | None]:
    """The first objective's value in a sweep, or None and why nothing was measured."""
    objective = space.objectives[0]
    value = read_metric(
        summary,
        objective.metric,
        objective.at,
        attainment=space.attainment,
        cost_level=_by_cost(space),
    )
    if value is None:
        return None, f"nothing measured for {objective.label}: {_why_missing(summary, space)}"
    return value, None


def _key(metric: str, at: float | None) -> str:
    return metric if at is None else f"{metric}@{at:g}"


def _why_missing(summary: BenchSummary, space: SearchSpace) -> str:
    if summary.failure:
        return summary.failure
    if _by_cost(space) and any(level.completed for level in summary.levels):
        return f"no level met the SLO for {space.attainment:.0%} of its requests"
    for level in summary.levels:
        if level.errors:
            kind, count = max(level.errors.items(), key=lambda item: item[1])
            example = level.error_examples.get(kind, "")
            return f"{count} requests failed ({kind}) at level {level.level}: {example}"
    return "the level did not run"


def _signature(run_path: Path, engine: str) -> LogEvent | None:
    """The first error (else warning) signature the engine's log matched."""
    log = RunDir(run_path).engine_log_path if run_path.is_dir() else None
    if log is None or not log.is_file():
        return None
    events = scan_log(log, engine)
    ranked = sorted(events, key=lambda e: (e.severity is not Severity.ERROR, e.line_no))
    serious = [e for e in ranked if e.severity in (Severity.ERROR, Severity.WARNING)]
    return serious[0] if serious else None


def _diagnose(run_path: Path, spec: EngineSpec, ctx: TrialContext) -> Diagnosis | None:
    """diagnosis.json for the trial (report and the seeds read it); None when it cannot."""
    from servelab.core.errors import ServelabError

    try:
        return diagnose_run(run_path, _diagnose_options(spec, ctx.probe_path), write=True)
    except ServelabError:
        return None


def _diagnose_options(spec: EngineSpec, probe_path: Path | None) -> DiagnoseOptions:
    """The sim's model profile names its deployment; other engines are read from the run."""
    options = spec.options
    scale = options.get("time_scale")
    time_scale = float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0
    common: dict[str, Any] = {"engine": spec.engine, "probe": probe_path}
    if spec.engine == "sim" and isinstance(options.get("model"), str):
        return DiagnoseOptions(
            model=options["model"],
            gpu=options.get("gpu"),
            gpus=spec.tp * spec.pp * spec.dp,
            tp=spec.tp,
            pp=spec.pp,
            ep=spec.ep,
            dp=spec.dp,
            weights=options.get("weights"),
            kv_dtype=str(options.get("kv_dtype", "bf16")),
            time_scale=time_scale,
            **common,
        )
    if spec.engine == "sim" and options.get("profile") == "glm5-rtxpro6000-tp8":
        return DiagnoseOptions(
            model="glm-5-nvfp4",
            gpu="rtx-pro-6000",
            tp=8,
            weights="nvfp4",
            time_scale=time_scale,
            **common,
        )
    return DiagnoseOptions(**common)


def _record_model(trial: optuna.Trial, ctx: TrialContext, spec: EngineSpec, fit: Any) -> None:
    """The model's account of the trial's layout at the first objective's load."""
    if fit.deployment is None:
        return
    space = ctx.space
    scale = spec.options.get("time_scale") if spec.engine == "sim" else None
    account = layout_model(
        fit.deployment,
        load=space.objectives[0].at or max(space.load.levels),
        cap=spec.knobs.max_running_requests,
        input_len=space.workload.input_len,
        output_len=space.workload.output_len or 0,
        fits=fit.ok,
        time_scale=float(scale) if isinstance(scale, int | float) and scale > 0 else 1.0,
    )
    trial.set_user_attr("model", account.model_dump(mode="json"))


def _same_settings(trial: optuna.Trial, params: dict[str, Any]) -> optuna.trial.FrozenTrial | None:
    """A finished trial with exactly these settings (the sampler may propose one twice)."""
    if trial.user_attrs.get("role") == "default":
        return None
    for other in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if other.number != trial.number and other.params == params:
            return other
    return None


def _copy(trial: optuna.Trial, same: optuna.trial.FrozenTrial) -> list[float]:
    for key in ("metrics", "levels", "run_dir", "model", "finding", "quality"):
        if key in same.user_attrs:
            trial.set_user_attr(key, same.user_attrs[key])
    trial.set_user_attr("same_as", same.number)
    for key, value in same.constraints.items():
        trial.set_constraint(key, value)
    assert same.values is not None
    return list(same.values)


def _end(
    trial: optuna.Trial, ctx: TrialContext, outcome: str, reason: str | None, started: float
) -> None:
    trial.set_user_attr(OUTCOME, outcome)
    trial.set_user_attr("duration_s", round(time.monotonic() - started, 3))
    if reason:
        reason = scrub(reason)  # an engine's error may quote its command line or a token
        trial.set_user_attr("reason", reason)
    ctx.on_event(TrialEvent(trial.number, str(trial.user_attrs.get("role")), {}, outcome, reason))


def _role(trial: optuna.Trial) -> str:
    """Enqueued trials carry theirs; a retry of the default trial is still the default."""
    given = trial.user_attrs.get("role")
    frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
    if "failed_trial" in frozen.system_attrs and given != "default":
        return "retry"
    return str(given or "search")
