"""A tune study with a quality tolerance on the simulator: a faster trial that answers
wrongly is rejected with its fault as the reason, and the clean slower one wins; without a
tolerance the faster one wins. Each study runs two trials: the default, then the faster
corrupted setting, enqueued in the study's storage between two `tune run`s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.tune.test_study import study, tune, write_space

FAST_AND_WRONG = {
    "options.itl_ms": 1,
    "options.corrupt": "wrong-token",
    "options.corrupt_after_tokens": 2,
}
"""An eighth of the default's time per token, and every answer's third token the runner-up
instead of the model's greedy choice (the rest follows from it)."""
FASTER = 1.5
"""16 tokens take 5 + 15 x 8 = 125 ms at the default's timing and 5 + 15 x 1 = 20 ms at the
fast one's, 6.25x; the client's own time per request (a few ms each on a busy 2-core
machine) eats into that, so the bound asked is well under it."""


def _space(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "study": name,
        "base": {"engine": "sim", "options": {"ttft_ms": 5, "itl_ms": 8}, "startup_timeout_s": 60},
        "space": {
            "options.itl_ms": [1],
            "options.corrupt": ["wrong-token"],
            "options.corrupt_after_tokens": [2],
        },
        "workload": {"input_len": 32, "output_len": 16},
        "load": {"concurrency": [2], "num_requests": 8, "warmup": 0},
        "objective": "output_throughput",
        "trials": 2,
        "diagnose_seeds": 0,
        **fields,
    }


def _two_trials(tmp_path: Path, name: str, *flags: str, **fields: Any) -> dict[str, Any]:
    """The default alone, then the fast corrupted setting enqueued and run."""
    space = write_space(tmp_path / f"{name}.yaml", _space(name, **fields))
    out = tmp_path / name
    common = [str(space), "--out", str(out), "--runs-dir", str(tmp_path / "runs"), *flags]
    first = tune("run", *common, "--trials", "1", "--no-report")
    assert first.returncode == 0, first.stderr[-3000:]
    storage = f"sqlite:///{out / 'study.db'}"
    optuna.load_study(study_name=name, storage=storage).enqueue_trial(
        FAST_AND_WRONG, user_attrs={"role": "search"}
    )
    second = tune("run", *common)
    result = study(out)
    result["stderr"] = second.stderr
    result["returncode"] = second.returncode
    return result


@pytest.mark.timing
def test_a_faster_trial_that_answers_wrongly_is_infeasible_under_a_tolerance(tmp_path: Path):
    """With logprobs (the simulator speaks vLLM's), the wrong token keeps the model's
    scores, so |Δlogprob| is 0; but each answer's own logprobs show its token 2 below the
    position's best at temperature 0: not_greedy, broken whatever the tolerance (rule 1 of
    tune.quality)."""
    # four probes keep it short; the flag replaces the file's tolerance
    quality = {"tolerance": 1.0, "prompts": 4}
    result = _two_trials(tmp_path, "right", "--quality-tolerance", "0.01", quality=quality)
    assert result["returncode"] == 0, result["stderr"][-3000:]
    assert result["quality_tolerance"] == 0.01
    default, fast = sorted(result["trials"], key=lambda t: t["number"])
    assert fast["params"] == FAST_AND_WRONG
    assert fast["state"] == "complete" and fast["values"][0] > FASTER * default["values"][0]
    assert default["quality"]["accepted"] and default["quality"]["reference_trial"] is None
    quality = fast["quality"]
    assert quality["reference_trial"] == 0 and not quality["accepted"], quality
    assert quality["verdict"] == "broken" and set(quality["errors"]) == {"not_greedy"}
    assert fast["feasible"] is False
    assert fast["reason"].startswith("quality broken against trial 0: not_greedy x")
    assert result["best"] == [0]
    own = json.loads((tmp_path / "right" / fast["run_dir"] / "quality.json").read_text())
    (config,) = [c for c in own["comparisons"] if c["kind"] == "configuration"]
    assert config["verdict"] == "broken" and "not_greedy" in config["reason"]
    before = next(p for p in own["passes"] if p["name"] == "before")
    assert any("first at token 2" in (r["error"] or "") for r in before["readings"])
    assert "quality broken against trial 0: not_greedy" in result["stderr"]
    report = (tmp_path / "right" / "report.md").read_text()
    assert "| quality vs default |" in report and "| broken |" in report


@pytest.mark.timing
def test_without_a_tolerance_the_faster_trial_wins(tmp_path: Path):
    result = _two_trials(tmp_path, "fast")
    assert result["returncode"] == 0, result["stderr"][-3000:]
    assert result["quality_tolerance"] is None
    default, fast = sorted(result["trials"], key=lambda t: t["number"])
    assert fast["params"] == FAST_AND_WRONG and fast["feasible"] is True
    assert fast["values"][0] > FASTER * default["values"][0]
    assert fast["quality"] is None and fast["reason"] is None
    assert result["best"] == [fast["number"]]
    assert not (tmp_path / "fast" / fast["run_dir"] / "quality.json").exists()
