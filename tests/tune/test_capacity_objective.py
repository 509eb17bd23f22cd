"""`objective: capacity`: each trial searches the highest load that meets the study's SLO,
trials rank by it, and its early stop compares loads with the best trial's capacity."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml

from servelab.bench.attainment import SloSample
from servelab.bench.capacity import CapacitySearch
from servelab.bench.load import LoadMode
from servelab.bench.results import SweepStop
from servelab.core.errors import ConfigError
from servelab.tune.capacity import capacity_plan, give_up_below
from servelab.tune.space import parse_space
from servelab.tune.targets import read_metric
from servelab.tune.trial import _best_feasible
from tests.conftest import SERVELAB
from tests.report.builders import bench_summary
from tests.unit.helpers import level_summary

BASE = {"engine": "sim", "options": {"ttft_ms": 20, "itl_ms": 30}, "startup_timeout_s": 60}


def space(**given: Any):
    document = {
        "base": BASE,
        "space": {"options.itl_ms": [30, 40]},
        "objective": "capacity",
        "slo": "ttft=100ms",
        **given,
    }
    return parse_space(document, source="space.yaml", text="", default_name="cap")


def test_capacity_is_a_maximised_objective_read_at_no_level():
    parsed = space(attainment=0.99, load={"concurrency": 2, "max": 64})
    (objective,) = parsed.objectives
    assert (objective.metric, objective.at, objective.direction) == ("capacity", None, "maximize")
    assert objective.unit == "concurrent"
    plan = capacity_plan(parsed)
    assert plan is not None
    assert (plan.start, plan.max_load, plan.attainment) == (2, 64, 0.99)
    assert plan.slo_ms == {"ttft": 100.0} and plan.mode is LoadMode.CONCURRENCY
    rates = space(load={"request_rate": 0.5})
    assert rates.objectives[0].unit == "req/s"
    rate_plan = capacity_plan(rates)
    assert rate_plan is not None and rate_plan.max_load == 1024 and rate_plan.start == 0.5
    assert capacity_plan(space(objective="total_throughput", slo=None)) is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"slo": None}, "capacity needs SLOs"),
        ({"load": {"concurrency": [1, 8]}}, "chooses its own levels"),
        ({"load": {"concurrency": 8, "max": 4}}, "load.max is under the start level"),
        ({"objective": "capacity@8"}, "drop the @level"),
        ({"objective": ["capacity", "total_throughput"]}, "the study's one objective"),
        ({"objective": "total_throughput", "attainment": 0.9}, "attainment is for objective"),
        ({"objective": "total_throughput", "load": {"max": 8}}, "load.max is for objective"),
        ({"constraints": ["capacity >= 8"]}, "capacity is an objective, not a constraint"),
        ({"attainment": 1.5}, "attainment"),
    ],
)
def test_a_capacity_space_that_cannot_run_is_one_config_error(given, message):
    with pytest.raises(ConfigError, match=message):
        space(**given)


def _summary(held: float | None, status_loads: list[tuple[float, bool]]):
    """A capacity run whose levels ran at these (load, meets) in order."""
    search = CapacitySearch(capacity_plan(space()))  # type: ignore[arg-type]
    levels = []
    for index, (load, meets) in enumerate(status_loads):
        choice = search.next_load()
        assert not isinstance(choice, SweepStop) and choice[0] == load
        level = level_summary(int(load), 100.0 * load, index=index)
        good = np.full(40, meets)
        search.observe(level, SloSample(good, {"ttft": np.where(good, 20.0, 900.0)}, 4))
        levels.append(level)
    assert isinstance(search.next_load(), SweepStop)
    result = search.result()
    assert result.capacity == held
    return bench_summary(levels).model_copy(update={"capacity": result})


def test_a_trial_is_worth_its_capacity_and_its_constraints_are_read_there():
    summary = _summary(3, [(1, True), (2, True), (4, False), (3, True)])
    assert read_metric(summary, "capacity", None) == 3
    # a constraint without @ is read at the capacity's level (3), not the last one run
    assert read_metric(summary, "total_throughput", None) == 300
    none = _summary(None, [(1, False)])
    assert read_metric(none, "capacity", None) == 0.0
    nothing = none.model_copy(
        update={"levels": [lv.model_copy(update={"completed": 0}) for lv in none.levels]}
    )
    assert read_metric(nothing, "capacity", None) is None


def test_early_stop_gives_up_where_a_failure_puts_the_capacity_under_the_bar():
    """The best feasible trial held 32 (an infeasible one more): with early_stop 0.5, a trial
    whose search fails at 16 or less cannot reach 16 and ends there, pruned as behind."""
    study = optuna.create_study(direction="maximize")
    for value, violation in ((32.0, -1.0), (100.0, 1.0)):
        study.add_trial(
            optuna.trial.create_trial(value=value, constraints={"error_rate <= 0.01": violation})
        )
    parsed = space()
    give_up = give_up_below(parsed, _best_feasible(study, maximize=True))
    assert give_up == 16
    plan = capacity_plan(parsed, give_up=give_up)
    assert plan is not None
    search = CapacitySearch(plan)
    for index, meets in enumerate([True, True, True, True, False]):  # 1, 2, 4, 8 meet; 16 fails
        choice = search.next_load()
        assert not isinstance(choice, SweepStop)
        good = np.full(40, meets)
        search.observe(
            level_summary(int(choice[0]), 100.0, index=index),
            SloSample(good, {"ttft": np.where(good, 20.0, 900.0)}, 4),
        )
    stop = search.next_load()
    assert isinstance(stop, SweepStop) and stop.reason == "behind"
    assert search.result().capacity == 8
    assert give_up_below(space(early_stop=0), 32.0) is None
    assert give_up_below(parsed, None) is None


@pytest.mark.timing
def test_a_study_ranks_its_trials_by_capacity(tmp_path: Path):
    """Two trials of the simulator with fixed timing (TTFT 20 ms, a slot held for
    20 + 7 x 30 = 230 ms), its running-request cap 1 (the base) and 2; SLO TTFT <= 60 ms
    for 90%. Up to the cap no request waits; one client over it, a queued request waits a
    slot, on average at least S / C (Little's law) = 230 ms or 115 ms, so at least
    (W - 40) / (S - 40) = 100% or 39% of requests miss the SLO. Capacities: 1 and 2; the
    cap-2 trial is the best."""
    document = {
        "study": "cap",
        "base": {**BASE, "knobs": {"max_running_requests": 1}},
        "space": {"knobs.max_running_requests": [1, 2]},
        "workload": {"input_len": 16, "output_len": 8},
        "load": {"concurrency": 1, "max": 8, "warmup": 0},
        "objective": "capacity",
        "slo": "ttft=60ms",
        "trials": 2,
        "diagnose_seeds": 0,
    }
    path = tmp_path / "cap.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    out = tmp_path / "study"
    done = subprocess.run(
        [*SERVELAB, "tune", "run", str(path), "--out", str(out), "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "study.json").read_text())
    values = {
        t["params"]["knobs.max_running_requests"]: t["values"][0]
        for t in result["trials"]
        if t["state"] == "complete"
    }
    assert values == {1: 1.0, 2: 2.0}, result["trials"]
    (best,) = result["best"]
    assert next(t for t in result["trials"] if t["number"] == best)["params"] == {
        "knobs.max_running_requests": 2
    }
    trial = next(t for t in result["trials"] if t["number"] == best)
    summary = json.loads((out / trial["run_dir"] / "summary.json").read_text())
    assert summary["capacity"]["capacity"] == 2 and summary["capacity"]["status"] == "found"
