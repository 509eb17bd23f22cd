"""`servelab tune` on the real vLLM: from a cap of 2, the raised cap (diagnose's action)
beats the default by more than the noise band of the two trials' own requests, and the
gain diagnose predicted for it is checked against what the trial measured (two trials,
two launches)."""

from __future__ import annotations

import json

from servelab.bench.noise import level_sample, rate_statistic, ratio_band
from servelab.bench.results import BenchSummary
from servelab.store import RunDir
from servelab.tune.targets import level_at
from tests.vllm.conftest import CAP, OBJECTIVE_LEVEL, RAISED_CAP, TuneRun


def _sample(study: TuneRun, cap: int):
    run_dir = study.run_dir(study.trial_at_cap(cap))
    summary = RunDir(run_dir).load_summary(BenchSummary)
    assert summary is not None
    level = level_at(summary.levels, float(OBJECTIVE_LEVEL))
    assert level is not None
    records = [
        row
        for row in map(json.loads, (run_dir / "requests.jsonl").read_text().splitlines())
        if row["level"] == level.level
    ]
    sample = level_sample(level, records)
    assert sample is not None
    return sample


def test_the_raised_cap_beats_the_default_beyond_the_noise_band(vllm_tune_study: TuneRun):
    result = vllm_tune_study.result
    default = result.trial(result.default_trial or 0)
    assert default is not None and default.params == {"knobs.max_running_requests": CAP}
    raised = vllm_tune_study.trial_at_cap(RAISED_CAP)
    assert result.best == [raised.number]
    band = ratio_band(
        _sample(vllm_tune_study, CAP),
        _sample(vllm_tune_study, RAISED_CAP),
        rate_statistic("total_throughput"),
    )
    assert band.lo > 1.0, band
    gain = result.gain_over_default()
    assert gain is not None and band.lo <= gain * 1.001
    assert result.best_command is not None
    command = result.best_command
    assert command[command.index("--max-num-seqs") + 1] == str(RAISED_CAP)
    best = (vllm_tune_study.folder / "best.yaml").read_text()
    assert f"max_running_requests: {RAISED_CAP}" in best


def test_the_raised_cap_is_diagnoses_action_and_its_predicted_gain_holds(vllm_tune_study: TuneRun):
    """The default trial's running_request_cap asks for a cap of 64; the study runs it next
    and checks the gain the finding stated against what that trial measured."""
    raised = vllm_tune_study.trial_at_cap(RAISED_CAP)
    assert raised.role == "diagnose", [
        (t.number, t.role, t.params) for t in vllm_tune_study.result.trials
    ]
    check = raised.prediction
    assert check is not None and check.applies.endswith(":running_request_cap"), check
    assert check.measured is not None and check.low is not None and check.high is not None
    assert check.verdict == "inside", check.text
    assert check.measured > 1.0, check.text
