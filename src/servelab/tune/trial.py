"""One trial: the spec the sampler chose, launched and swept into its own run directory.

The run directory is a normal one (summary.json, requests.jsonl, engine.log, diagnosis.json),
so `servelab report` and `servelab diagnose` read a trial like any run. What a trial ends
as is kept in its user attributes, which the study document is rebuilt from:

- complete: every objective measured; constraints recorded with `trial.set_constraint`;
- pruned: a layout the machine or the model rules out (never launched), or a sweep stopped
  early because its first level was far behind the best trial's;
- failed: the engine would not start or died (its reason and the log signature that
  explains it), or an objective's level has no measurement.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from servelab.bench.events import BenchEvent
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
from servelab.core.severity import Severity
from servelab.diagnose import DiagnoseOptions, Diagnosis, diagnose_run
from servelab.engines.base import EngineSpec
from servelab.engines.signatures import LogEvent, scan_log
from servelab.engines.spec import spec_yaml
from servelab.probe.report import ProbeReport
from servelab.store import RunDir
from servelab.tune.params import apply_params
from servelab.tune.prune import available_gpus, check_fit, layout_model
from servelab.tune.space import SearchSpace
from servelab.tune.targets import level_at, read_metric

__all__ = ["TrialContext", "TrialEvent", "TrialFailed", "run_trial", "trial_dir"]

OUTCOME = "outcome"
"""User attribute every trial that ended on its own carries (a stale one has none)."""
TRIALS_DIR = "trials"
_KEPT = frozenset({"role", "action"})


class TrialFailed(Exception):
    """The trial's engine would not start or died: a failed trial, never a failed study."""


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
    ctx.on_event(TrialEvent(trial.number, role, params))
    started = time.monotonic()
    try:
        values = _measure(trial, ctx, params)
    except optuna.TrialPruned as exc:
        _end(trial, ctx, "pruned", str(exc), started)
        raise
    except TrialFailed as exc:
        _end(trial, ctx, "failed", str(exc), started)
        raise
    _end(trial, ctx, "complete", None, started)
    return values


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
    summary = _sweep(trial, ctx, spec, run_path)
    command = (summary.engine or {}).get("command")
    if isinstance(command, list):
        trial.set_user_attr("command", command)
    if ctx.probe is not None and run_path.is_dir():
        RunDir(run_path).write_probe(ctx.probe)
    levels = {
        f"{v:g}": read_metric(summary, space.objectives[0].metric, v) for v in space.load.levels
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
    values = [metrics.get(_key(o.metric, o.at)) for o in space.objectives]
    missing = [o.label for o, v in zip(space.objectives, values, strict=True) if v is None]
    if missing:
        raise TrialFailed(f"nothing measured for {', '.join(missing)}: {_why_missing(summary)}")
    return [float(v) for v in values if v is not None]


def _sweep(
    trial: optuna.Trial, ctx: TrialContext, spec: EngineSpec, run_path: Path
) -> BenchSummary:
    config = _bench_config(trial, ctx, run_path)
    try:
        outcome = bench_engine(spec, config, on_event=ctx.on_event)
    except EngineLaunchError as exc:
        event = _signature(run_path, spec.engine)
        if event is not None:
            trial.set_user_attr("signature", event.signature)
        detail = f" ({event.signature}: {event.text.strip()})" if event is not None else ""
        raise TrialFailed(f"the engine did not start: {exc}{detail}") from None
    except EngineDied as exc:
        event = _signature(run_path, spec.engine)
        if event is not None:
            trial.set_user_attr("signature", event.signature)
        raise TrialFailed(f"the engine died: {exc}") from None
    except (EngineSetupError, EndpointError) as exc:
        raise TrialFailed(str(exc)) from None
    return outcome.summary


def _bench_config(trial: optuna.Trial, ctx: TrialContext, run_path: Path) -> BenchConfig:
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
        name=f"{space.name}-trial-{trial.number:03d}",
        out=run_path,
        runs_root=ctx.runs_root,
        command=ctx.command or [],
        gpus=list(ctx.telemetry_gpus or []),
        stop_early=_early_stop(trial, ctx),
    )


def _early_stop(
    trial: optuna.Trial, ctx: TrialContext
) -> Callable[[Sequence[LevelSummary]], SweepStop | None] | None:
    """After the first level: stop when it reaches less than `early_stop` of the best
    finished trial's first level (in the first objective's metric)."""
    space = ctx.space
    objective = space.objectives[0]
    first = space.load.levels[0]
    if space.early_stop <= 0 or len(space.load.levels) < 2:
        return None
    best = _best_at(trial.study, f"{first:g}", maximize=objective.direction == "maximize")
    if best is None:
        return None

    def stop(levels: Sequence[LevelSummary]) -> SweepStop | None:
        if len(levels) != 1:
            return None
        level = level_at(levels, first)
        value = getattr(level, objective.metric, None) if level is not None else None
        if not isinstance(value, int | float):
            return None
        behind = (
            value < space.early_stop * best
            if objective.direction == "maximize"
            else value * space.early_stop > best
        )
        if not behind:
            return None
        return SweepStop(
            reason="behind",
            level=0,
            explanation=f"stopped early: {objective.metric} at {first:g} is {value:,.4g}, "
            f"under {space.early_stop:.0%} of the best trial's {best:,.4g}",
        )

    return stop


def _best_at(study: optuna.Study, level: str, *, maximize: bool) -> float | None:
    seen = [
        t.user_attrs["levels"][level]
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if isinstance(t.user_attrs.get("levels"), dict)
        and isinstance(t.user_attrs["levels"].get(level), int | float)
    ]
    if not seen:
        return None
    return max(seen) if maximize else min(seen)


def _metrics(summary: BenchSummary, space: SearchSpace) -> dict[str, float | None]:
    wanted = [(o.metric, o.at) for o in space.objectives]
    wanted += [(c.metric, c.at) for c in space.constraints]
    return {_key(metric, at): read_metric(summary, metric, at) for metric, at in wanted}


def _key(metric: str, at: float | None) -> str:
    return metric if at is None else f"{metric}@{at:g}"


def _why_missing(summary: BenchSummary) -> str:
    if summary.failure:
        return summary.failure
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
    for key in ("metrics", "levels", "run_dir", "model", "finding"):
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
        trial.set_user_attr("reason", reason)
    ctx.on_event(TrialEvent(trial.number, str(trial.user_attrs.get("role")), {}, outcome, reason))


def _role(trial: optuna.Trial) -> str:
    """Enqueued trials carry theirs; a retry of the default trial is still the default."""
    given = trial.user_attrs.get("role")
    frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
    if "failed_trial" in frozen.system_attrs and given != "default":
        return "retry"
    return str(given or "search")
