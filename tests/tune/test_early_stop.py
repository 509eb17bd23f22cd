"""Early stop compares like with like: the objective's metric at the objective's level,
against the best feasible trial; a level where every request failed is a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from servelab.bench.results import LevelSummary
from servelab.tune.space import parse_space
from servelab.tune.trial import TrialContext, _early_stop
from tests.unit.helpers import level_summary


def _space(objective: str, levels: list[int]) -> Any:
    document = {
        "base": {"engine": "sim", "options": {"ttft_ms": 5, "itl_ms": 2}},
        "space": {"options.itl_ms": [2, 4]},
        "load": {"concurrency": levels, "num_requests": 8},
        "objective": objective,
        "constraints": ["p99_ttft_ms <= 2000"],
    }
    return parse_space(document, source="space.yaml", text="", default_name="stop")


def _level(concurrency: int, output: float, index: int, **fields: Any) -> LevelSummary:
    level = level_summary(concurrency, output * 2, index=index)
    return level.model_copy(update={"output_throughput": output, **fields})


def _done(study: optuna.Study, value: float, levels: dict[str, float], violation: float) -> None:
    study.add_trial(
        optuna.trial.create_trial(
            value=value,
            user_attrs={"levels": levels, "outcome": "complete"},
            constraints={"p99_ttft_ms <= 2000": violation},
        )
    )


def _stop(tmp_path: Path, objective: str, levels: list[int]):
    study = optuna.create_study(direction="maximize")
    # the best feasible trial: 10 at concurrency 1, 100 at 4 (the objective), 120 at 8
    _done(study, 100.0, {"1": 10.0, "4": 100.0, "8": 120.0}, violation=-0.5)
    # faster everywhere, but it broke the TTFT constraint: no bar to measure against
    _done(study, 1000.0, {"1": 500.0, "4": 1000.0, "8": 1100.0}, violation=0.5)
    ctx = TrialContext(
        space=_space(objective, levels), study_dir=tmp_path, probe=None, probe_path=None
    )
    return _early_stop(study.ask(), ctx)


def test_a_slow_first_level_does_not_stop_a_trial_judged_at_a_later_level(tmp_path: Path):
    stop = _stop(tmp_path, "output_throughput@4", [1, 4, 8])
    assert stop is not None
    # far behind at concurrency 1 (1 against 10): not the objective's level, no verdict
    assert stop([_level(1, 1.0, 0)]) is None
    # at the objective's level, 60 is over half the best feasible trial's 100
    assert stop([_level(1, 1.0, 0), _level(4, 60.0, 1)]) is None
    # 40 is under half of 100 (the infeasible 1000 is not the bar)
    behind = stop([_level(1, 1.0, 0), _level(4, 40.0, 1)])
    assert behind is not None and behind.reason == "behind"
    assert "output_throughput at 4 is 40" in behind.explanation
    assert "best feasible trial's 100" in behind.explanation


def test_an_objective_at_the_last_level_has_nothing_to_stop_early(tmp_path: Path):
    stop = _stop(tmp_path, "output_throughput@8", [1, 4, 8])
    levels = [_level(1, 1.0, 0), _level(4, 1.0, 1)]
    assert stop is None or stop(levels) is None


def test_a_level_where_every_request_failed_is_a_failure_not_an_early_stop(tmp_path: Path):
    stop = _stop(tmp_path, "output_throughput@4", [1, 4])
    assert stop is not None
    failed = _level(1, 0.0, 0, completed=0, failed=8, total_throughput=0.0)
    ended = stop([failed])
    assert ended is not None and ended.reason == "errors"
    assert "every request failed" in ended.explanation
