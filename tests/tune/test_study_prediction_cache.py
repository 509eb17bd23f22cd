"""A study document is written after every trial: a finished trial's prediction check is
computed once, not again at every write (each check diagnoses a run and bootstraps two
runs' requests)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from servelab.diagnose.check import Applies, PredictionCheck
from servelab.tune import study as study_module
from servelab.tune.results import TrialRow


def _check(applies: Applies, run: Path) -> PredictionCheck:
    return PredictionCheck(
        applies=applies.label,
        metric="total throughput",
        at="concurrency 8",
        predicted=2.0,
        low=1.0,
        high=4.0,
        measured=1.5,
        verdict="inside",
        text=f"{applies.label} against {run.name}",
    )


def test_a_finished_trials_check_is_computed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls: list[tuple[Path, Path]] = []

    def counted(applies: Applies, run: Path) -> PredictionCheck:
        calls.append((applies.run, run))
        return _check(applies, run)

    monkeypatch.setattr(study_module, "check_prediction", counted)
    study_module._checked.cache_clear()
    rows = [
        TrialRow(number=0, state="complete", role="default", params={}, run_dir="trial-0"),
        TrialRow(number=1, state="complete", role="diagnose", params={}, run_dir="trial-1"),
    ]
    seeded = optuna.trial.create_trial(
        value=1.0, user_attrs={"applies": {"trial": 0, "kind": "running_request_cap"}}
    )
    for _ in range(3):  # three study writes
        checked = study_module._with_prediction(rows[1], seeded, rows, tmp_path)
        assert checked.prediction is not None
        assert checked.prediction.text.endswith("against trial-1")
    assert calls == [(tmp_path / "trial-0", tmp_path / "trial-1")]

    other = tmp_path.parent / "another-study"
    study_module._with_prediction(rows[1], seeded, rows, other)
    assert len(calls) == 2, "another study's trials are checked on their own"
