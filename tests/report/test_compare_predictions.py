"""`servelab report A B` where B applied a finding of A: the report shows the finding's
predicted gain beside what B measured, and leads its headline with the verdict. Read from
the kept H200 runs (benchmarks/gpu/results/h200-planted): the 0.4% memory share's cache
and its rerun with the cache diagnose asked for."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.conftest import SERVELAB

RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results" / "h200-planted"


def _copy(name: str, folder: Path) -> Path:
    run = folder / name
    run.mkdir(parents=True)
    for file in ("summary.json", "engine_events.json", "probe.json"):
        shutil.copy(RUNS / name / file, run / file)
    return run


def _applies(run_b: Path, recorded: str) -> None:
    summary = json.loads((run_b / "summary.json").read_text())
    summary["run"]["applies"] = recorded
    (run_b / "summary.json").write_text(json.dumps(summary))


def _report(tmp_path: Path, *runs: Path) -> str:
    out = tmp_path / "report"
    result = subprocess.run(
        [*SERVELAB, "report", *map(str, runs), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return (out / "report.md").read_text().replace("\\_", "_")


def _row(report: str) -> list[str]:
    """The prediction table's row of run B (its tone mark before the label)."""
    row = next(line for line in report.splitlines() if "B | A: kv_capacity" in line)
    return [cell.strip() for cell in row.strip(" |").split("|")]


def test_the_report_shows_the_prediction_b_checked_against_a(tmp_path: Path):
    runs = tmp_path / "runs"
    run_a, run_b = _copy("kv", runs), _copy("kv-applied", runs)
    # recorded from another directory: found beside B
    _applies(run_b, "elsewhere/kv:kv_capacity")
    report = _report(tmp_path, run_a, run_b)
    assert "Predictions checked" in report
    cells = _row(report)
    assert cells[2] == "total throughput at concurrency 16"
    assert cells[3].startswith("1.85x (1-2.29)"), cells
    # B measured 7,283 tok/s at 16 streams where A measured 4,051
    assert cells[4].startswith(f"{7283 / 4051:.3g}x"), cells
    assert cells[5] == "inside"
    headline = report.split("Predictions checked")[0]
    assert "B applies A's kv_capacity: predicted 1.85x" in headline


def test_a_finding_a_does_not_have_is_said_so_not_hidden(tmp_path: Path):
    runs = tmp_path / "runs"
    run_a, run_b = _copy("graphs", runs), _copy("kv-applied", runs)
    _applies(run_b, f"{run_a}:kv_capacity")
    report = _report(tmp_path, run_a, run_b)
    cells = _row(report)
    assert cells[5] == "no interval" and cells[3] == "-", cells


def test_runs_that_apply_nothing_have_no_prediction_table(tmp_path: Path):
    runs = tmp_path / "runs"
    run_a, run_b = _copy("kv", runs), _copy("kv-applied", runs)
    assert "Predictions checked" not in _report(tmp_path, run_a, run_b)
