"""`servelab tune run` on real engines started on 127.0.0.1: the simulator and the embedded
transformers serve. Every trial is a launch and a sweep; the study's files are read back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import SERVELAB


def write_space(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def tune(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVELAB, "tune", *args], capture_output=True, text=True, timeout=timeout
    )


def study(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "study.json").read_text())


STORY = {
    "study": "story-cap",
    "base": {
        "engine": "sim",
        "options": {"profile": "glm5-rtxpro6000-tp8", "time_scale": 50},
        "knobs": {"max_running_requests": 64},
        "startup_timeout_s": 60,
    },
    "space": {"knobs.max_running_requests": [32, 128, 256]},
    "workload": {"input_len": 256, "output_len": 128},
    "load": {"concurrency": [1, 128], "warmup": 0},
    "objective": "total_throughput@128",
    "trials": 3,
}


@pytest.mark.timing
def test_the_story_study_raises_the_cap_and_a_rerun_continues_it(tmp_path: Path):
    """DESIGN.md's story on the simulator: from the server's cap of 64, diagnose's action
    (a higher cap) is the second trial, and the best gives >= 1.6x the base at 128."""
    space = write_space(tmp_path / "story.yaml", STORY)
    out = tmp_path / "study"
    runs = ["--out", str(out), "--runs-dir", str(tmp_path / "runs")]
    first = tune("run", str(space), *runs)
    assert first.returncode == 0, first.stderr[-3000:]
    result = study(out)
    trials = {t["number"]: t for t in result["trials"]}
    assert trials[0]["role"] == "default"
    assert trials[0]["params"] == {"knobs.max_running_requests": 64}
    assert trials[1]["role"] == "diagnose"
    assert trials[1]["params"]["knobs.max_running_requests"] > 64
    # the diagnose trial carries the finding it applies, checked against what it measured
    prediction = trials[1]["prediction"]
    assert prediction["applies"].endswith(":running_request_cap"), prediction
    assert prediction["measured"] is not None and prediction["verdict"] == "inside", prediction
    # before it launched, the default's twin predicted it at the new cap
    twin = trials[1]["twin"]
    assert twin is not None and twin["from_trial"] == 0, twin
    assert twin["changes"] == {"running_cap": trials[1]["params"]["knobs.max_running_requests"]}
    assert twin["low"] <= trials[1]["values"][0] <= twin["high"], (twin, trials[1]["values"])
    assert trials[0]["twin"] is None
    # the space lists every setting: the next is the untried one the twin predicts best
    ranked = trials[2]
    assert ranked["role"] == "twin", [t["role"] for t in trials.values()]
    untried = {32, 128, 256} - {trials[n]["params"]["knobs.max_running_requests"] for n in (0, 1)}
    assert ranked["params"]["knobs.max_running_requests"] == max(untried), ranked["params"]
    # predicted from the nearest finished trial (one of the first two), never unannounced
    assert ranked["twin"]["from_trial"] in (0, 1), ranked["twin"]
    assert any(f"ranked 1 of {len(untried)} untried" in n for n in result["notes"]), result
    assert result["storage"] == "sqlite:///study.db (in the study folder)"
    (best,) = result["best"]
    gain = trials[best]["values"][0] / trials[0]["values"][0]
    assert gain >= 1.6, result["trials"]
    assert yaml.safe_load((out / "best.yaml").read_text())["knobs"]["max_running_requests"] > 64
    command = (out / "best-command.txt").read_text()
    assert "--max-running-requests" in command and "--profile glm5-rtxpro6000-tp8" in command
    for trial in trials.values():
        if trial["state"] == "complete" and trial["reason"] is None:
            run = out / trial["run_dir"]
            assert json.loads((run / "summary.json").read_text())["status"] == "complete"
            assert (run / "diagnosis.json").is_file()
    report = (out / "report.md").read_text()
    assert "Tuning" in report and f"trial {best}" in report
    assert "report: " in first.stderr and f"{gain:.2f}x the default's" in first.stderr

    measured = [t for t in result["trials"] if t["reason"] is None]
    again = tune("run", str(space), *runs, "--trials", str(len(measured) + 1), "--no-report")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = study(out)
    before = {t["number"]: t["values"] for t in result["trials"]}
    after = {t["number"]: t["values"] for t in resumed["trials"]}
    assert {n: after[n] for n in before} == before
    new = [t for t in resumed["trials"] if t["number"] not in before]
    assert len([t for t in new if t["reason"] is None]) == 1
    assert [t["role"] for t in resumed["trials"]].count("default") == 1

    changed = write_space(tmp_path / "changed.yaml", {**STORY, "workload": {"input_len": 64}})
    refused = tune("run", str(changed), *runs)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: study 'story-cap' exists with another space (give the same space file to "
        "continue it, or --study NEW for a new study)"
    ]


@pytest.mark.timing
def test_trials_far_behind_stop_early_and_layouts_past_the_gpus_are_pruned(tmp_path: Path):
    space = write_space(
        tmp_path / "fixed.yaml",
        {
            "base": {
                "engine": "sim",
                "options": {"ttft_ms": 5, "itl_ms": 2},
                "startup_timeout_s": 60,
            },
            "gpus": 8,
            "space": {"options.itl_ms": [60], "tp": [16]},
            "workload": {"input_len": 32, "output_len": 16},
            "load": {"concurrency": [1, 4, 8], "num_requests": 8, "warmup": 0},
            "objective": "output_throughput@4",
            "trials": 4,
        },
    )
    out = tmp_path / "study"
    done = tune("run", str(space), "--out", str(out), "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    trials = study(out)["trials"]
    by_params = {(t["params"]["options.itl_ms"], t["params"]["tp"]): t for t in trials}
    assert by_params[(2, 1)]["state"] == "complete"
    for itl in (2, 60):
        pruned = by_params[(itl, 16)]
        assert pruned["state"] == "pruned"
        assert pruned["reason"] == "tp=16 needs 16 GPUs; 8 available"
        assert pruned["run_dir"] is None
    slow = by_params[(60, 1)]
    # 16 tokens 60 ms apart: 5 + 15 x 60 = 905 ms a request against the default's
    # 5 + 15 x 2 = 35 ms, about 1/26 of its throughput at 4, far under early_stop's 0.5
    assert slow["state"] == "pruned"
    # judged where the objective is read (concurrency 4), not at the first level
    assert slow["reason"].startswith("stopped early: output_throughput at 4 is")
    levels = json.loads((out / slow["run_dir"] / "summary.json").read_text())["levels"]
    assert [lv["max_concurrency"] for lv in levels] == [1, 4]


def test_an_engine_that_will_not_start_is_a_failed_trial_with_its_log_signature(tmp_path: Path):
    """The real case: transformers 5.24 refuses `--attn-implementation 'paged|eager'`."""
    space = write_space(
        tmp_path / "attention.yaml",
        {
            "base": {"engine": "embedded", "model": "tiny", "startup_timeout_s": 240},
            "space": {"knobs.attention_backend": ["paged|eager"]},
            "workload": {"input_len": 16, "output_len": 8},
            "load": {"concurrency": [1], "num_requests": 4, "warmup": 0},
            "objective": "output_throughput",
            "trials": 2,
        },
    )
    out = tmp_path / "study"
    done = tune("run", str(space), "--out", str(out), "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr[-3000:]
    trials = {t["params"]["knobs.attention_backend"]: t for t in study(out)["trials"]}
    assert trials[None]["state"] == "complete"
    failed = trials["paged|eager"]
    assert failed["state"] == "failed"
    assert failed["signature"] == "transformers.bad_attn_implementation"
    assert "the engine did not start" in failed["reason"]
    assert "Unsupported attention implementation: 'paged|eager'" in failed["reason"]
    assert ": failed: the engine did not start" in done.stderr


def test_a_model_account_of_an_earlier_shape_does_not_break_study_json():
    """A study.json written before a field of the model's account existed still reads:
    that trial's account is left out, its measurements stand."""
    from servelab.tune.results import TrialRow

    old = {"tp": 8, "pp": 1, "batch": 64, "step_ms": 31.0}  # no kv_max_requests, ...
    row = TrialRow.model_validate(
        {"number": 0, "state": "complete", "role": "default", "params": {}, "model": old}
    )
    assert row.model is None and row.state == "complete"
