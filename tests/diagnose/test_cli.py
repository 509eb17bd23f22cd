"""`servelab diagnose` and `servelab sim --calibrate` from the command line; the H200 run.

Bad input is one `error:` line and exit code 2; a good run prints the findings table and
writes diagnosis.json. The committed H200 reference run (the embedded engine's default on
one H200) is diagnosed as it was measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.bench.results import ClientStats, LevelSummary
from servelab.cli import app
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.model import analyze, deploy
from tests.diagnose.builders import level, neutral, summary, write_run
from tests.diagnose.probes import story_vm_probe

REPO = Path(__file__).resolve().parents[2]
H200_RUN = REPO / "benchmarks" / "gpu" / "results" / "h200-reference"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    levels = [
        level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20, completed=80, failed=20),
        level(1, 4, total_tps=380, tpot_ms=10, ttft_ms=20),
    ]
    return write_run(tmp_path / "run", summary(levels))


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["diagnose", *args])


def test_prints_the_findings_and_writes_diagnosis_json(run_dir: Path):
    result = invoke(str(run_dir))
    assert result.exit_code == 0, result.output
    assert "errors" in result.output and "critical" in result.output
    saved = json.loads((run_dir / "diagnosis.json").read_text())
    assert saved["schema"] == "servelab.diagnosis/1"
    assert saved["findings"][0]["kind"] == "errors"


def test_json_is_the_document(run_dir: Path):
    result = invoke(str(run_dir), "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["schema"] == "servelab.diagnosis/1"
    assert document["sources"]["model"]["available"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "no run directory at"),
        (["{empty}"], "has no summary.json"),
        (["{corrupt}"], "is not a valid summary.json"),
        (["{run}", "--model", "no-such-model"], "no-such-model"),
        (["{run}", "--model", "llama-3.1-8b", "--gpu", "h300"], "h300"),
        (["{run}", "--probe", "{missing}"], "no probe file at"),
        (["{run}", "--time-scale", "0"], "--time-scale must be above 0"),
        (["{run}", "--tp", "0"], "--tp must be at least 1"),
        (["{run}", "--engine", "vlm"], "unknown engine 'vlm' (did you mean 'vllm'?)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, run_dir: Path, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "summary.json").write_text("{not json")
    paths = {
        "missing": str(tmp_path / "missing"),
        "empty": str(tmp_path / "empty"),
        "corrupt": str(tmp_path / "corrupt"),
        "run": str(run_dir),
    }
    result = invoke(*(arg.format(**paths) for arg in args))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.strip().count("\n") == 0
    assert "Traceback" not in result.output


def test_as_a_subprocess(run_dir: Path):
    result = subprocess.run(
        [sys.executable, "-m", "servelab", "diagnose", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Diagnosis of hand-built" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--calibrate", "{probe}"], "needs the glm5-rtxpro6000-tp8 or model profile"),
        (["--profile", "linear", "--calibrate", "{probe}"], "not the linear profile"),
        (["--model", "llama-3.1-8b", "--gpu", "h200", "--calibrate", "{probe}"], "not h200"),
        (["--model", "llama-3.1-8b", "--gpu", "h200", "--calibrate", "{missing}"], "no probe"),
    ],
)
def test_sim_calibrate_refuses_what_it_cannot_use(tmp_path: Path, args, message):
    probe = story_vm_probe(tmp_path)
    paths = {"probe": str(probe), "missing": str(tmp_path / "nope.json")}
    result = CliRunner().invoke(app, ["sim", "--port", "0", *(a.format(**paths) for a in args)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.strip().count("\n") == 0


def _upgraded(document: dict[str, Any]) -> dict[str, Any]:
    """The committed run as the current schema reads it: fields added since get neutral values."""
    for lv in document["levels"]:
        for key, value in neutral(LevelSummary).items():
            lv.setdefault(key, value)
        for key, value in neutral(ClientStats).items():
            lv["client"].setdefault(key, value)
    return document


def test_the_h200_reference_run_is_launch_overhead(tmp_path: Path):
    """transformers serve's default on one H200: 34 tok/s at 19% of the power limit."""
    run = tmp_path / "h200"
    run.mkdir()
    document = _upgraded(json.loads((H200_RUN / "summary.json").read_text()))
    (run / "summary.json").write_text(json.dumps(document))
    for name in ("engine_events.json", "probe.json"):
        (run / name).write_text((H200_RUN / name).read_text())
    diagnosis = diagnose_run(run, DiagnoseOptions())  # the embedded engine knows its preset
    top = diagnosis.findings[0]
    assert top.kind.value == "launch_overhead" and top.severity.value == "critical"
    assert top.actions[0].flags == ["--cb-use-cuda-graph"]
    assert {e.source for e in top.evidence} >= {"summary.json level 0", "telemetry level 0"}
    [single] = [layers for layers in diagnosis.layers if layers.point == "single stream"]
    roofline, kernel, engine = single.layers
    ceiling = analyze(deploy("h200-ref"), input_len=512, output_len=64).single_stream_tokens_per_s
    assert roofline.tokens_per_s == pytest.approx(ceiling, rel=0.1)
    assert kernel.available  # the kernel floor, between the two
    assert roofline.tokens_per_s > kernel.tokens_per_s > engine.tokens_per_s
    assert engine.tokens_per_s == pytest.approx(1000 / document["levels"][0]["mean_tpot_ms"])
    assert sum(share.share for share in single.shares) == pytest.approx(1.0, abs=0.01)
