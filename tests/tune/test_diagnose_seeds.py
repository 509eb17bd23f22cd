"""The default's diagnosis seeds the next trials with its engine actions alone: an action on
the load (a bench setting) or outside servelab is never a trial, whatever knob it names."""

from __future__ import annotations

from pathlib import Path

import optuna

from servelab.diagnose.actions import bench_action, text_action
from servelab.diagnose.findings import Action, ActionTarget, FindingKind
from servelab.store import DIAGNOSIS_FILE
from servelab.tune import study as study_module
from servelab.tune.space import SearchSpace, parse_space
from servelab.tune.trial import trial_dir
from tests.report.builders import diagnosis, finding, sweep

SPACE = {
    "base": {"engine": "sim", "knobs": {"max_running_requests": 64}},
    "space": {
        "knobs.max_running_requests": [64, 128, 256],
        "env.OMP_NUM_THREADS": ["4", "7"],
    },
    "load": {"concurrency": [1, 128]},
    "objective": "total_throughput@128",
}


def _cap(value: int, target: ActionTarget) -> Action:
    return Action(
        text=f"running cap {value}", target=target, knob="max_running_requests", value=value
    )


def _seeded(tmp_path: Path, actions: list[Action]) -> list[dict[str, object]]:
    """The trials the default's diagnosis, with `actions`, enqueues."""
    space = parse_space(SPACE, source="space.yaml", text="", default_name="seeds")
    study = optuna.create_study(directions=["maximize"])
    defaults = {p.path: p.base_value for p in space.params}
    study.enqueue_trial(defaults, user_attrs={"role": "default"})
    trial = study.ask()
    _settings(trial, space)
    study.tell(trial, 1.0)
    default = study.trials[0]
    found = finding("a cap", kind=FindingKind.RUNNING_REQUEST_CAP).model_copy(
        update={"actions": actions}
    )
    folder = trial_dir(tmp_path, default.number)
    folder.mkdir(parents=True)
    (folder / DIAGNOSIS_FILE).write_text(diagnosis(sweep(), [found]).model_dump_json())
    study_module._seed_from_diagnosis(study, default, space, tmp_path)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    return [_settings(study.ask(), space) for _ in waiting]


def _settings(trial: optuna.Trial, space: SearchSpace) -> dict[str, object]:
    """The settings an enqueued trial is fixed to, as the sampler hands them out."""
    return {p.path: p.suggest(trial) for p in space.params}


def test_only_engine_actions_become_trials(tmp_path: Path):
    seeded = _seeded(
        tmp_path,
        [
            _cap(256, ActionTarget.LOAD),
            bench_action("--concurrency", "128,256", "extend the sweep"),
            text_action("give the GPUs peer-to-peer"),
            _cap(128, ActionTarget.ENGINE),
        ],
    )
    assert seeded == [{"knobs.max_running_requests": 128, "env.OMP_NUM_THREADS": None}]


def test_an_engine_env_action_sets_the_spaces_env_parameter(tmp_path: Path):
    threads = Action(
        text="env: {OMP_NUM_THREADS: 7} in its spec",
        target=ActionTarget.ENGINE,
        knob="env.OMP_NUM_THREADS",
        value="7",
        engine="sim",
        flags=["OMP_NUM_THREADS=7"],
    )
    seeded = _seeded(tmp_path, [threads])
    assert seeded == [{"knobs.max_running_requests": 64, "env.OMP_NUM_THREADS": "7"}]
