"""Predictions checked against a second run, on the kept H200 runs with one planted limit.

benchmarks/gpu/results/h200-planted holds h200-ref under transformers serve with its
defaults (CUDA graphs off), with a 0.4% memory share for the cache, and with 128 batch
tokens per step, each diagnosed from its own run; and the reruns with the first action
applied (graphs on; --cb-num-blocks 48; 1,024 batch tokens). Each planted limit must be
the first finding, and the factor its rerun measured must lie in the stated interval.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.check import check_prediction, parse_applies
from servelab.diagnose.findings import FindingKind
from tests.conftest import SERVELAB

RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results" / "h200-planted"
FILES = ("summary.json", "engine_events.json", "probe.json")
CASES = [
    ("default", FindingKind.LAUNCH_OVERHEAD, "graphs", "--cb-use-cuda-graph"),
    ("kv", FindingKind.KV_CAPACITY, "kv-applied", "--cb-num-blocks"),
    ("batch", FindingKind.BATCH_TOKEN_BUDGET, "batch-applied", "--cb-max-batch-tokens"),
]


def _copy(name: str, tmp_path: Path) -> Path:
    run = tmp_path / name
    run.mkdir()
    for file in FILES:
        shutil.copy(RUNS / name / file, run / file)
    return run


@pytest.mark.parametrize(("planted", "kind", "applied", "flag"), CASES)
def test_the_planted_limit_is_first_and_its_rerun_lands_in_the_interval(
    tmp_path: Path, planted: str, kind: FindingKind, applied: str, flag: str
):
    run_a, run_b = _copy(planted, tmp_path), _copy(applied, tmp_path)
    top = diagnose_run(run_a, DiagnoseOptions()).findings[0]
    assert top.kind is kind
    assert top.actions[0].flags[0] == flag, top.actions
    check = check_prediction(parse_applies(f"{run_a}:{kind.value}"), run_b)
    assert check.measured is not None and check.low is not None and check.high is not None
    assert check.verdict == "inside", check.text
    assert check.low <= check.measured <= check.high
    assert check.band_note is not None and "requests.jsonl" in check.band_note


def test_the_rerun_records_what_it_applies_and_diagnose_checks_it(tmp_path: Path):
    run_a, run_b = _copy("kv", tmp_path), _copy("kv-applied", tmp_path)
    summary = json.loads((run_b / "summary.json").read_text())
    summary["run"]["applies"] = f"{run_a}:kv_capacity"
    (run_b / "summary.json").write_text(json.dumps(summary))
    check = diagnose_run(run_b, DiagnoseOptions(), write=False).prediction
    assert check is not None and check.verdict == "inside", check
    assert check.at == "concurrency 16" and check.metric == "total throughput"
    assert check.measured == pytest.approx(7283 / 4051, rel=0.01)


def test_a_finding_the_earlier_run_does_not_have_is_said_so(tmp_path: Path):
    run_a, run_b = _copy("graphs", tmp_path), _copy("kv-applied", tmp_path)
    check = check_prediction(parse_applies(f"{run_a}:kv_capacity"), run_b)
    assert check.verdict == "no interval" and "no such finding" in check.text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nocolon", "expected RUN_DIR:KIND"),
        ("{run}:not_a_kind", "no finding kind 'not_a_kind'"),
        ("{missing}:kv_capacity", "is not a run directory"),
    ],
)
def test_a_bad_applies_is_one_clear_line(tmp_path: Path, text: str, says: str):
    run = _copy("kv", tmp_path)
    with pytest.raises(ConfigError, match=says):
        parse_applies(text.format(run=run, missing=tmp_path / "nowhere"))


def test_bench_refuses_a_bad_applies_before_it_sends_anything(tmp_path: Path):
    result = subprocess.run(
        [
            *SERVELAB,
            *("bench", "--url", "http://127.0.0.1:9", "--applies", f"{tmp_path}:kv_capacity"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "is not a run directory" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("measured", "band", "verdict"),
    [
        (1.5, None, "inside"),
        (8.4, (6.1, 12.4), "within noise"),
        (8.4, (7.0, 9.9), "outside"),
        (8.4, None, "outside"),
    ],
)
def test_a_factor_outside_the_interval_whose_band_reaches_it_is_within_noise(
    measured: float, band: tuple[float, float] | None, verdict: str
):
    from servelab.diagnose.check import _verdict
    from servelab.diagnose.findings import ExpectedGain

    gain = ExpectedGain(factor=5.4, metric="median TTFT", source="test", text="", low=1.2, high=6.4)
    assert _verdict(gain, measured, band) == verdict
