"""A study: Optuna's search over one space, its trials real launches, on one or more hosts.

The first trial is the base spec as given; once it is measured, the engine actions
`diagnose` proposes for it that lie in the space are the next trials; then the sampler searches
(TPE, or the whole grid when the space lists fewer settings than the trial budget).
Every worker (`tune run`, `tune join`) takes trials until the study holds `trials`
finished ones or its time budget ends, and rewrites study.json after each.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast, get_args

import optuna
from pydantic import ValidationError

from servelab.bench.cluster import ClusterSpec
from servelab.bench.cost import resolve_price
from servelab.bench.cost_results import HourlyPrice
from servelab.core.errors import ConfigError, ServelabError
from servelab.core.redact import MASK, register_secret
from servelab.diagnose import Diagnosis
from servelab.diagnose.check import Applies, PredictionCheck, check_prediction
from servelab.diagnose.findings import Action, ActionTarget, FindingKind
from servelab.engines.base import LAYOUT_NAMES
from servelab.probe.report import ProbeReport
from servelab.store import DEFAULT_RUNS_DIR, RunDir
from servelab.tune.grid_order import rank_untried, untried_settings
from servelab.tune.noise import best_noise
from servelab.tune.quality import constraint_text
from servelab.tune.results import (
    CONFIRM_FILE,
    STUDY_FILE,
    Confirmation,
    LayoutModel,
    NoiseCheck,
    StudyResult,
    TrialQuality,
    TrialRole,
    TrialRow,
    TwinForecast,
)
from servelab.tune.space import SearchSpace, parse_space
from servelab.tune.storage import (
    DEFAULT_HEARTBEAT_S,
    STUDY_DB,
    display_url,
    open_storage,
    storage_url,
)
from servelab.tune.targets import COST
from servelab.tune.trial import (
    OUTCOME,
    TrialContext,
    TrialEvent,
    TrialFailed,
    finished_trials,
    run_trial,
    trial_dir,
    twin_forecast,
)

__all__ = [
    "BEST_COMMAND_FILE",
    "BEST_SPEC_FILE",
    "WorkerConfig",
    "default_study_dir",
    "join_study",
    "run_study",
    "show_study",
]

BEST_SPEC_FILE = "best.yaml"
BEST_COMMAND_FILE = "best-command.txt"
SPACE_FILE = "space.yaml"
_ATTR_SPACE = "space_document"
_ATTR_TEXT = "space_text"
_ATTR_QUESTION = "question"
_ATTR_SAMPLER = "sampler"
_ATTR_NOTES = "notes"
_ENV_PATH = "env."
"""An action's knob env.NAME (an engine spec's environment variable) is the space's path."""
ATTR_CONFIRMATION = "confirmation"
"""The study's user attribute holding `tune run --confirm`'s Confirmation."""
_BUDGET_KEYS = frozenset({"trials", "time_budget", "study"})
_MAX_PROPOSALS = 3
"""A setting proposed again reuses its measurement and does not count against the budget,
up to this many proposals per budgeted trial (a sampler stuck on a small space ends)."""
_STATES = {
    optuna.trial.TrialState.COMPLETE: "complete",
    optuna.trial.TrialState.PRUNED: "pruned",
    optuna.trial.TrialState.FAIL: "failed",
    optuna.trial.TrialState.RUNNING: "running",
    optuna.trial.TrialState.WAITING: "waiting",
}


@dataclass(frozen=True)
class WorkerConfig:
    """How this worker takes part: where its trials' folders go, what it may spend."""

    storage: str | None = None
    out: Path | None = None
    """The study's folder; default <runs_root>/tune-<name>."""
    runs_root: Path | None = None
    trials: int | None = None
    """Finished trials the study should hold; default the space's."""
    time_budget_s: float | None = None
    heartbeat_s: int = DEFAULT_HEARTBEAT_S
    telemetry_gpus: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    probe: Callable[[], ProbeReport | None] = lambda: None
    confirm: int = 0
    """After the study, re-measure the best and the default this many times each."""
    cluster: ClusterSpec | None = None
    """Every trial's load from client workers on a Ray cluster's nodes (bench.cluster)."""
    price: HourlyPrice | None = None
    """What the deployment costs an hour: every trial's tokens are priced (objective cost)."""


def default_study_dir(name: str, config: WorkerConfig) -> Path:
    return config.out or (config.runs_root or DEFAULT_RUNS_DIR) / f"tune-{name}"


def run_study(
    space: SearchSpace,
    config: WorkerConfig,
    *,
    on_event: Callable[[Any], None] = lambda _e: None,
) -> StudyResult:
    """Create the study (or continue it: the same space, the same storage) and work on it."""
    _check_price(space, config)
    study_dir = default_study_dir(space.name, config)
    url = storage_url(config.storage, study_dir)
    _make_dir(study_dir)
    storage = open_storage(url, heartbeat_s=config.heartbeat_s)
    study = _open(space, storage, create=True)
    RunDir(study_dir).write_text(SPACE_FILE, space.text)
    ctx = _context(space, config, study_dir, on_event)
    result = _work(study, space, config, ctx, url)
    if config.confirm > 0:
        result = _confirm(study, space, ctx, url, result, config.confirm)
    return result


def _confirm(
    study: optuna.Study,
    space: SearchSpace,
    ctx: TrialContext,
    url: str,
    result: StudyResult,
    repeats: int,
) -> StudyResult:
    """--confirm: the pairs re-measured, kept in the storage (so every host's study.json and
    `tune show --storage` hold them) and in confirm.json, after each pair."""
    from servelab.tune.confirm import confirm_best

    def keep(confirmation: Confirmation) -> None:
        document = confirmation.model_dump(mode="json")
        study.set_user_attr(ATTR_CONFIRMATION, document)
        RunDir(ctx.study_dir).write_json(CONFIRM_FILE, document)

    done = confirm_best(result, space, ctx, repeats, on_pair=keep)
    if done is None:
        ctx.on_event(
            TrialEvent(
                -1,
                "study",
                {},
                "confirm",
                "nothing to confirm: no single best other than the default",
            )
        )
        return result
    result = study_result(study, space, url, ctx.study_dir)
    write_outputs(result, ctx.study_dir)
    return result


def join_study(
    name: str,
    config: WorkerConfig,
    *,
    on_event: Callable[[Any], None] = lambda _e: None,
) -> StudyResult:
    """Another worker on a study that exists in `config.storage` (its space is read there)."""
    if config.storage is None:
        raise ConfigError("tune join needs --storage: the database the study lives in")
    study_dir = default_study_dir(name, config)
    url = storage_url(config.storage, study_dir)
    _make_dir(study_dir)
    storage = open_storage(url, heartbeat_s=config.heartbeat_s)
    space = _stored_space(name, storage)
    _check_price(space, config)
    study = _open(space, storage, create=False)
    RunDir(study_dir).write_text(SPACE_FILE, space.text)
    return _work(study, space, config, _context(space, config, study_dir, on_event), url)


def show_study(target: str, storage: str | None = None) -> StudyResult:
    """The study document: from the storage when given, else the folder's study.json
    (`target` a folder, or a study name under the default runs folder)."""
    if storage is not None:
        url = storage_url(storage, Path("."))
        opened = open_storage(url)
        space = _stored_space(target, opened)
        study = _open(space, opened, create=False)
        return study_result(study, space, url, None)
    folder = Path(target)
    if not (folder / STUDY_FILE).is_file():
        folder = DEFAULT_RUNS_DIR / f"tune-{target}"
    path = folder / STUDY_FILE
    if not path.is_file():
        raise ConfigError(f"no study at {target}", hint="a study folder, or --storage URL")
    from pydantic import ValidationError

    try:
        return StudyResult.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a study document: {exc.errors()[0]['msg']}") from None


def study_result(
    study: optuna.Study, space: SearchSpace, url: str, study_dir: Path | None
) -> StudyResult:
    """The study document as the storage holds it now."""
    trials = study.get_trials(deepcopy=False)
    retried = {
        int(t.system_attrs["failed_trial"]): t.number
        for t in trials
        if "failed_trial" in t.system_attrs
    }
    rows = [_row(t, retried, study_dir) for t in trials]
    rows = [
        _with_prediction(row, trial, rows, study_dir)
        for row, trial in zip(rows, trials, strict=True)
    ]
    reused = {t.number for t in trials if t.user_attrs.get("same_as") is not None}
    best = _best(study, space, [r for r in rows if r.number not in reused])
    default = next(
        (r.number for r in rows if r.role == "default" and r.state == "complete"),
        next((r.number for r in rows if r.role == "default"), None),
    )
    top = next((r for r in rows if best and r.number == best[0]), None)
    measured = [r for r in rows if r.number not in reused]
    return StudyResult(
        name=study.study_name,
        storage=_storage_text(url, study_dir),
        space_file=space.source,
        engine=space.base.engine,
        workload=space.workload_text(),
        objectives=space.objectives,
        constraints=[c.text for c in space.constraints]
        + ([constraint_text(space.quality)] if space.quality is not None else []),
        quality_tolerance=space.quality.tolerance if space.quality is not None else None,
        sampler=str(study.user_attrs.get(_ATTR_SAMPLER, _sampler_name(space))),
        trials=rows,
        best=best,
        default_trial=default,
        best_spec_yaml=top.spec_yaml if top else None,
        best_command=top.command if top else None,
        best_noise=_best_noise(top, measured, default, space, study_dir),
        confirmation=_confirmation(study.user_attrs.get(ATTR_CONFIRMATION)),
        notes=list(study.user_attrs.get(_ATTR_NOTES, [])),
    )


def _best_noise(
    top: TrialRow | None,
    rows: list[TrialRow],
    default: int | None,
    space: SearchSpace,
    study_dir: Path | None,
) -> list[NoiseCheck]:
    """The best against the runner-up and the default, where there is one objective."""
    if top is None or len(space.objectives) != 1:
        return []
    sign = 1 if space.objectives[0].direction == "maximize" else -1
    rest = [
        r
        for r in rows
        if r.number != top.number and r.state == "complete" and r.feasible and r.values
    ]
    runner = max(rest, key=lambda r: (sign * (r.values or [0.0])[0], -r.number), default=None)
    others: list[tuple[TrialRow, str]] = []
    if runner is not None:
        others.append((runner, "runner-up" + (" and default" if runner.number == default else "")))
    base = next((r for r in rows if r.number == default), None)
    skip = (top.number, runner.number if runner is not None else None)
    if base is not None and base.number not in skip and base.state == "complete" and base.values:
        others.append((base, "default"))
    return best_noise(top, others, space.objectives[0], study_dir)


def _confirmation(given: Any) -> Confirmation | None:
    if not isinstance(given, dict):
        return None
    try:
        return Confirmation.model_validate(given)
    except ValidationError:
        return None


def _check_price(space: SearchSpace, config: WorkerConfig) -> None:
    """A study that reads a cost needs a price; every host of a study gives the same one."""
    metrics = [o.metric for o in space.objectives] + [c.metric for c in space.constraints]
    if COST in metrics and config.price is None:
        raise ConfigError(
            "a cost needs a price: give --gpu-hour-price or --machine-hour-price",
            hint="every host that joins the study gives the same price",
        )


def _context(
    space: SearchSpace, config: WorkerConfig, study_dir: Path, on_event: Callable[[Any], None]
) -> TrialContext:
    """What this worker's trials share: the machine's probe (written once), its folders."""
    probe = config.probe()
    if config.price is not None:  # a GPU price its base's GPUs cannot be counted for: now
        resolve_price(config.price, spec=space.base, gpus=config.telemetry_gpus, probe=probe)
    probe_path: Path | None = None
    if probe is not None:
        probe_path = RunDir(study_dir).write_probe(probe)
    return TrialContext(
        space=space,
        study_dir=study_dir,
        probe=probe,
        probe_path=probe_path,
        runs_root=config.runs_root,
        telemetry_gpus=config.telemetry_gpus,
        command=config.command,
        cluster=config.cluster,
        price=config.price,
        on_event=on_event,
    )


def _work(
    study: optuna.Study,
    space: SearchSpace,
    config: WorkerConfig,
    ctx: TrialContext,
    url: str,
) -> StudyResult:
    study_dir, on_event = ctx.study_dir, ctx.on_event
    wanted = config.trials or space.trials
    budget = config.time_budget_s if config.time_budget_s is not None else space.time_budget_s
    deadline = time.monotonic() + budget if budget is not None else None
    grid = _grid(space) if _sampler_name(space) == "grid" else None
    listed = _grid(space) if space.grid_size() is not None else None
    try:
        while True:
            finished = [t for t in study.get_trials(deepcopy=False) if OUTCOME in t.user_attrs]
            measured = [t for t in finished if t.user_attrs.get("same_as") is None]
            if len(measured) >= wanted or len(finished) >= _MAX_PROPOSALS * wanted:
                break
            if deadline is not None and time.monotonic() >= deadline:
                on_event(TrialEvent(-1, "study", {}, "budget", "the time budget is spent"))
                break
            if grid is not None and _grid_done(grid, finished) and not _waiting(study):
                break
            if listed is not None and not _waiting(study):
                _enqueue_best_predicted(study, space, listed, ctx)
            study.optimize(
                lambda trial: run_trial(trial, ctx),
                n_trials=1,
                catch=(TrialFailed,),
                callbacks=[lambda s, t: _after(s, t, space, study_dir, url)],
            )
    finally:
        result = study_result(study, space, url, study_dir)
        write_outputs(result, study_dir)
    return result


def _enqueue_best_predicted(
    study: optuna.Study, space: SearchSpace, grid: dict[str, list[Any]], ctx: TrialContext
) -> None:
    """The untried setting of a space that lists them all (a grid, or lists alone) the
    twin predicts best, as the next trial, with the ranking in the study's notes; nothing
    where the twin predicts none of them."""
    finished = finished_trials(study, ctx)
    if not finished:
        return
    tried = [t.params for t in study.get_trials(deepcopy=False) if t.params]
    ranked = rank_untried(
        untried_settings(grid, tried),
        space.objectives[0],
        space.constraints,
        lambda params, target: twin_forecast(ctx, params, finished, target),
    )
    if not ranked:
        return
    best = ranked[0]
    said = best.text(1, len(ranked))
    study.enqueue_trial(best.params, user_attrs={"role": "twin", "ranked": said})
    settings = ", ".join(f"{k.removeprefix('knobs.')}={v}" for k, v in best.params.items())
    notes = list(study.user_attrs.get(_ATTR_NOTES, []))
    study.set_user_attr(_ATTR_NOTES, [*notes, f"next, {settings}: {said}"])


def write_outputs(result: StudyResult, study_dir: Path) -> None:
    """study.json, and the best spec and its command beside it."""
    folder = RunDir(study_dir)
    folder.write_json_text(STUDY_FILE, result.model_dump_json(by_alias=True, indent=1) + "\n")
    if result.best_spec_yaml:
        folder.write_text(BEST_SPEC_FILE, result.best_spec_yaml)
    if result.best_command:
        folder.write_text(BEST_COMMAND_FILE, shlex.join(result.best_command) + "\n")


def _after(
    study: optuna.Study,
    trial: optuna.trial.FrozenTrial,
    space: SearchSpace,
    study_dir: Path,
    url: str,
) -> None:
    if (
        trial.user_attrs.get("role") == "default"
        and trial.state is optuna.trial.TrialState.COMPLETE
    ):
        _seed_from_diagnosis(study, trial, space, study_dir)
    write_outputs(study_result(study, space, url, study_dir), study_dir)


def _seed_from_diagnosis(
    study: optuna.Study, default: optuna.trial.FrozenTrial, space: SearchSpace, study_dir: Path
) -> None:
    """The default's diagnosis engine actions that are settings of the space, as the next
    trials."""
    path = trial_dir(study_dir, default.number)
    diagnosis = RunDir(path).load_diagnosis(Diagnosis) if path.is_dir() else None
    if diagnosis is None or space.diagnose_seeds == 0:
        return
    notes = list(study.user_attrs.get(_ATTR_NOTES, []))
    seeded = 0
    for finding in diagnosis.findings:
        for action in finding.actions:
            change = _action_params(action, space)
            if change is None:
                continue
            params = {**default.params, **change}
            if params == default.params:
                continue
            if not all(p.contains(params[p.path]) for p in space.params if p.path in change):
                notes.append(f"diagnose's action is outside the space: {action.text}")
                continue
            study.enqueue_trial(
                params,
                user_attrs={
                    "role": "diagnose",
                    "action": action.text,
                    "applies": {"trial": default.number, "kind": finding.kind.value},
                },
                skip_if_exists=True,
            )
            seeded += 1
            if seeded >= space.diagnose_seeds:
                study.set_user_attr(_ATTR_NOTES, notes)
                return
    study.set_user_attr(_ATTR_NOTES, notes)


def _action_params(action: Action, space: SearchSpace) -> dict[str, Any] | None:
    """The space's parameters an engine action sets; None when it sets none of them (an
    action on the load or outside the engine is never a trial: a study varies the engine)."""
    knob, value = action.knob, action.value
    if action.target is not ActionTarget.ENGINE or knob is None or value is None:
        return None
    if knob == "layout" and isinstance(value, str):
        if space.param("layout") is not None:
            return {"layout": value}
        sizes = dict(part.split("=", 1) for part in value.split(",") if "=" in part)
        change = {
            key: int(size)
            for key, size in sizes.items()
            if key in LAYOUT_NAMES and space.param(key) is not None and size.isdigit()
        }
        return change or None
    path = knob if knob.startswith(_ENV_PATH) else f"knobs.{knob}"
    return {path: value} if space.param(path) is not None else None


def _open(space: SearchSpace, storage: optuna.storages.RDBStorage, *, create: bool) -> optuna.Study:
    """The study: created with its question and first trial, or loaded when it exists and
    asks the same question."""
    sampler = _sampler(space)
    directions = [o.direction for o in space.objectives]
    question = _question(space)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if space.name not in names:
        if not create:
            raise ConfigError(f"no study {space.name!r} in that storage")
        study = optuna.create_study(
            study_name=space.name,
            storage=storage,
            directions=directions,
            sampler=sampler,
            load_if_exists=True,
        )
        if _ATTR_QUESTION not in study.user_attrs:
            study.set_user_attr(_ATTR_QUESTION, question)
            study.set_user_attr(_ATTR_SPACE, space.document)
            study.set_user_attr(_ATTR_TEXT, space.text)
            study.set_user_attr(_ATTR_SAMPLER, _sampler_name(space))
            study.enqueue_trial(
                {p.path: p.base_value for p in space.params},
                user_attrs={"role": "default"},
                skip_if_exists=True,
            )
        return study
    study = optuna.load_study(study_name=space.name, storage=storage, sampler=sampler)
    stored = study.user_attrs.get(_ATTR_QUESTION)
    if stored is not None and stored != question:
        raise ConfigError(
            f"study {space.name!r} exists with another space",
            hint="give the same space file to continue it, or --study NEW for a new study",
        )
    return study


def _stored_space(name: str, storage: optuna.storages.RDBStorage) -> SearchSpace:
    try:
        summary = next(s for s in optuna.get_all_study_summaries(storage) if s.study_name == name)
    except StopIteration:
        raise ConfigError(f"no study {name!r} in that storage") from None
    document = summary.user_attrs.get(_ATTR_SPACE)
    if not isinstance(document, dict):
        raise ConfigError(f"study {name!r} was not made by servelab tune (no space stored)")
    text = str(summary.user_attrs.get(_ATTR_TEXT, ""))
    space = parse_space(document, source=f"study {name}", text=text, default_name=name)
    return _with_local_secrets(space)


def _with_local_secrets(space: SearchSpace) -> SearchSpace:
    """The stored space holds no secret (***): a worker takes the base's secret env values
    from its own environment, and cannot launch with a secret flag it was never given."""
    env = dict(space.base.env)
    missing = []
    for name, value in env.items():
        if value == MASK:
            if os.environ.get(name):
                env[name] = os.environ[name]
                register_secret(env[name])
            else:
                missing.append(name)
    if missing:
        raise ConfigError(
            f"study {space.name!r}'s base sets {', '.join(missing)}, a secret the study does "
            "not store",
            hint=f"set {missing[0]} in this worker's environment",
        )
    flags = [arg for arg in space.base.extra_args if MASK in arg]
    if flags or MASK in json.dumps(space.base.options, default=str):
        raise ConfigError(
            f"study {space.name!r}'s base passes a secret option, which the study does not "
            "store; a worker on another host cannot launch it",
            hint="give the engine its secret through an environment variable instead",
        )
    if env == space.base.env:
        return space
    return space.model_copy(update={"base": space.base.model_copy(update={"env": env})})


def _question(space: SearchSpace) -> str:
    """What makes two runs the same study: the file's content (base inlined) but for its
    budget. The document, not the parsed space, so that a later servelab with new defaults
    continues a study an earlier one began."""
    data = {k: v for k, v in space.document.items() if k not in _BUDGET_KEYS}
    return json.dumps(data, sort_keys=True, default=str)


def _sampler_name(space: SearchSpace) -> str:
    if space.sampler != "auto":
        return space.sampler
    size = space.grid_size()
    return "grid" if size is not None and size <= space.trials else "tpe"


def _sampler(space: SearchSpace) -> optuna.samplers.BaseSampler:
    name = _sampler_name(space)
    if name == "grid":
        return optuna.samplers.GridSampler(_grid(space), seed=space.seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=space.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=space.seed,
            n_startup_trials=max(2, min(10, space.trials // 3)),
            multivariate=True,
            constant_liar=True,
        )


def _grid(space: SearchSpace) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for param in space.params:
        values = param.grid_values()
        if values is not None:
            grid[param.path] = values
    return grid


def _grid_done(grid: dict[str, list[Any]], finished: list[optuna.trial.FrozenTrial]) -> bool:
    points = {json.dumps(t.params, sort_keys=True) for t in finished}
    total = 1
    for values in grid.values():
        total *= len(values)
    return len(points) >= total


def _waiting(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))


def _best(study: optuna.Study, space: SearchSpace, rows: list[TrialRow]) -> list[int]:
    feasible = [r for r in rows if r.state == "complete" and r.feasible and r.values]
    if not feasible:
        return []
    if len(space.objectives) == 1:
        sign = 1 if space.objectives[0].direction == "maximize" else -1
        top = max(feasible, key=lambda r: (sign * r.values[0] if r.values else 0.0, -r.number))
        return [top.number]
    numbers = {r.number for r in feasible}
    return sorted(t.number for t in study.best_trials if t.number in numbers)


def _row(
    trial: optuna.trial.FrozenTrial, retried: dict[int, int], study_dir: Path | None
) -> TrialRow:
    attrs = trial.user_attrs
    state = _STATES.get(trial.state, "failed")
    reason = attrs.get("reason")
    if state == "failed" and OUTCOME not in attrs:
        again = retried.get(trial.number)
        reason = "its worker stopped beating (died or was killed)" + (
            f"; retried as trial {again}" if again is not None else ""
        )
    if attrs.get("same_as") is not None:
        reason = f"the settings of trial {attrs['same_as']}: its measurement is reused"
    constraints = list(trial.constraints.values()) if trial.constraints else None
    feasible = None
    if state == "complete":
        feasible = all(v <= 0 for v in constraints) if constraints else True
    run_dir = attrs.get("run_dir")
    given = attrs.get("role") or ("retry" if "failed_trial" in trial.system_attrs else "search")
    role = cast(TrialRole, given if given in get_args(TrialRole) else "search")
    return TrialRow(
        number=trial.number,
        state=state,  # type: ignore[arg-type]
        role=role,
        params=dict(trial.params) if trial.params else dict(_fixed(trial)),
        values=list(trial.values) if trial.values is not None and state == "complete" else None,
        metrics=attrs.get("metrics", {}),
        constraints=constraints,
        feasible=feasible,
        reason=reason,
        signature=attrs.get("signature"),
        run_dir=run_dir,
        host=attrs.get("host"),
        retry_of=trial.system_attrs.get("failed_trial"),
        duration_s=attrs.get("duration_s"),
        spec_yaml=attrs.get("spec_yaml"),
        command=attrs.get("command"),
        model=_layout_model(attrs.get("model")),
        twin=_twin_forecast(attrs.get("twin")),
        quality=_trial_quality(attrs.get("quality")),
    )


def _trial_quality(given: Any) -> TrialQuality | None:
    if not isinstance(given, dict):
        return None
    try:
        return TrialQuality.model_validate(given)
    except ValidationError:
        return None


def _with_prediction(
    row: TrialRow, trial: optuna.trial.FrozenTrial, rows: list[TrialRow], study_dir: Path | None
) -> TrialRow:
    """A trial seeded from a diagnose action, with that finding's expected gain checked
    against what it measured beside the trial it was found in."""
    applies = trial.user_attrs.get("applies")
    if not isinstance(applies, dict) or study_dir is None or row.run_dir is None:
        return row
    source = next((r for r in rows if r.number == applies.get("trial")), None)
    if source is None or source.run_dir is None or row.state != "complete":
        return row
    try:
        kind = FindingKind(str(applies.get("kind")))
        check = _checked(study_dir / source.run_dir, kind, study_dir / row.run_dir)
    except (ValueError, ServelabError, OSError):
        return row
    return row.model_copy(update={"prediction": check})


@functools.lru_cache(maxsize=256)
def _checked(source: Path, kind: FindingKind, run: Path) -> PredictionCheck:
    """A complete trial's check, computed once: the study document is written after every
    trial, and both runs' files no longer change (the check diagnoses the source run and
    bootstraps both runs' requests)."""
    return check_prediction(Applies(source, kind), run)


def _twin_forecast(given: Any) -> TwinForecast | None:
    if not isinstance(given, dict):
        return None
    try:
        return TwinForecast.model_validate(given)
    except ValidationError:
        return None


def _layout_model(given: Any) -> LayoutModel | None:
    """The trial's model account; one recorded by an earlier servelab in another shape is
    left out rather than failing the whole document."""
    if not isinstance(given, dict):
        return None
    try:
        return LayoutModel.model_validate(given)
    except ValidationError:
        return None


def _fixed(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    fixed = trial.system_attrs.get("fixed_params")
    return fixed if isinstance(fixed, dict) else {}


def _storage_text(url: str, study_dir: Path | None) -> str:
    """The storage as the document records it: the default file by its name in the study
    folder (no host's path), any other URL with its password hidden."""
    if study_dir is not None and url == storage_url(None, study_dir):
        return f"sqlite:///{STUDY_DB} (in the study folder)"
    return display_url(url)


def _make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the study folder {path}: {exc.strerror}") from None
