"""`objective: cost`: USD per million total tokens, minimised, read at each trial's cheapest
level that meets the study's SLO; a GPU price counts each trial's own GPUs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from servelab.bench.cost import level_cost, resolve_price
from servelab.bench.cost_results import HourlyPrice
from servelab.cli import app
from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.tune.space import parse_space
from servelab.tune.targets import read_metric
from tests.conftest import SERVELAB
from tests.report.builders import bench_summary
from tests.unit.helpers import level_summary

BASE = {"engine": "sim", "options": {"ttft_ms": 5, "itl_ms": 2}, "startup_timeout_s": 60}


def space(**given: Any):
    document = {
        "base": BASE,
        "space": {"tp": [1, 2]},
        "load": {"concurrency": [1, 4]},
        "objective": "cost",
        "slo": "ttft=100ms",
        **given,
    }
    return parse_space(document, source="space.yaml", text="", default_name="cost")


def test_cost_is_minimised_because_it_says_so_not_by_its_name():
    parsed = space(attainment=0.75, constraints=["p99_ttft_ms <= 50"])
    (objective,) = parsed.objectives
    assert (objective.metric, objective.at, objective.direction) == ("cost", None, "minimize")
    assert objective.unit == "$/M tokens"
    assert parsed.attainment == 0.75
    assert parsed.constraints[0].at is None  # read where the cost is: its cheapest level
    at_four = space(objective="cost@4", slo=None)
    assert (at_four.objectives[0].at, at_four.objectives[0].direction) == (4.0, "minimize")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"slo": None}, "cost is read at the cheapest level that meets the SLO: give slo"),
        ({"objective": {"metric": "cost", "direction": "maximize"}}, "cost is minimised"),
        ({"objective": "cost@8"}, "level 8 is not among the load's levels"),
        ({"objective": "total_throughput", "attainment": 0.8}, "attainment is for objective"),
    ],
)
def test_a_cost_objective_it_cannot_read_is_refused(given: dict[str, Any], message: str):
    with pytest.raises(ConfigError, match=message):
        space(**given)


def test_the_cost_is_read_at_the_cheapest_level_that_meets_the_slo():
    """Concurrency 4 is cheaper but misses its SLO; the cost is concurrency 1's."""
    price = resolve_price(
        HourlyPrice(basis="gpu_hour", usd=2.0, source="test"), spec=EngineSpec(engine="sim", tp=2)
    )
    levels = []
    for index, (concurrency, tok_s, good) in enumerate([(1, 400.0, 1.0), (4, 1600.0, 0.5)]):
        level = level_summary(concurrency, tok_s, index).model_copy(
            update={"slo_ms": {"ttft": 100.0}, "good_fraction": good}
        )
        levels.append(level.model_copy(update={"cost": level_cost(level, price)}))
    summary = bench_summary(levels)
    # 2 GPUs at $2 an hour: $4 / 3600 s / 400 tok/s x 1e6 = $2.778 per million
    assert read_metric(summary, "cost", None) == pytest.approx(4 / 3600 / 400 * 1e6)
    assert read_metric(summary, "cost", 4.0) == pytest.approx(4 / 3600 / 1600 * 1e6)
    assert read_metric(summary, "cost", None, attainment=0.4) == pytest.approx(
        4 / 3600 / 1600 * 1e6
    )
    # a constraint of a cost study is read at the cost's level
    assert read_metric(summary, "total_throughput", None, cost_level=True) == 400.0


STUDY = {
    "study": "cheapest",
    "base": BASE,
    "space": {"options.itl_ms": [2, 8], "options.ttft_ms": [5, 200]},
    "workload": {"input_len": 16, "output_len": 16},
    "load": {"concurrency": [1, 4], "num_requests": 8, "warmup": 0},
    "objective": "cost",
    "slo": "ttft=100ms",
    "attainment": 0.75,
    "sampler": "grid",
    "diagnose_seeds": 0,
    "trials": 3,
}


def test_a_cost_study_picks_the_cheapest_trial_that_meets_the_slo(tmp_path: Path):
    """A first token at 200 ms misses the 100 ms SLO at every level: such a trial has no
    cost to read. Tokens 8 ms apart take longer, so cost more, than 2 ms apart. The default
    (5 ms, 2 ms) is the cheapest that meets the SLO, and each trial's value is its summary's
    own: one GPU (the spec's layout) at $2 an hour."""
    space_file = tmp_path / "cost.yaml"
    space_file.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    out = tmp_path / "study"
    command = [*SERVELAB, "tune", "run", str(space_file), "--out", str(out), "--no-report"]
    done = subprocess.run(
        [*command, "--runs-dir", str(tmp_path / "runs"), "--gpu-hour-price", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "study.json").read_text())
    assert result["objectives"][0]["direction"] == "minimize"
    trials = {
        (t["params"]["options.itl_ms"], t["params"]["options.ttft_ms"]): t for t in result["trials"]
    }
    assert len(trials) == 3 and (2, 5) in trials
    best = trials[(2, 5)]
    assert result["best"] == [best["number"]]
    # a cost well under $1 keeps its digits: 0.154, not 0.2
    value = best["values"][0]
    assert f"best: trial {best['number']}: cost {value:.3g} $/M tokens" in done.stderr
    for (_, ttft), trial in trials.items():
        if ttft == 200:
            assert trial["state"] == "failed", trial
            assert "no level met the SLO for 75% of its requests" in trial["reason"]
            continue
        assert trial["state"] == "complete", trial
        summary = json.loads((out / trial["run_dir"] / "summary.json").read_text())
        assert summary["price"]["gpus"] == 1 and summary["price"]["usd_per_hour"] == 2.0
        assert summary["price"]["gpus_source"] == "the engine spec's layout (one GPU)"
        # by hand: $2 an hour over the tokens per second of each level meeting the SLO
        costs = [
            2.0
            / 3600
            / ((lv["total_input_tokens"] + lv["total_output_tokens"]) / lv["duration"])
            * 1e6
            for lv in summary["levels"]
            if lv["good_fraction"] >= 0.75
        ]
        assert trial["values"][0] == pytest.approx(min(costs))


def test_a_cost_study_without_a_price_is_refused_before_any_trial(tmp_path: Path):
    space_file = tmp_path / "cost.yaml"
    space_file.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    out = tmp_path / "study"
    refused = CliRunner().invoke(app, ["tune", "run", str(space_file), "--out", str(out)])
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        "error: a cost needs a price: give --gpu-hour-price or --machine-hour-price (every "
        "host that joins the study gives the same price)"
    ]
    assert not out.exists()
