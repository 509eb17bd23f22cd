"""diagnose with the twin, on real engine runs: the suite's vLLM for CPUs with a planted step
budget and its rerun at the budget diagnose asked for, and a tuning study's cap of 2 and
its trial at the cap diagnose asked for (kept in benchmarks/results/twin).

The planted limit is ranked by lifting it in the replay, the other configured limits are
set but not binding, every gain the action states is checked by the rerun, and
`--what-if` prints the replay at any value asked.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.findings import ExpectedGain, Finding, FindingKind
from servelab.store import TWIN_FILE, RunDir
from servelab.twin import TwinResult
from tests.conftest import SERVELAB

KEPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "twin"


def _unpack(name: str, into: Path) -> Path:
    run = into / name
    run.mkdir(parents=True)
    for path in (KEPT / name).iterdir():
        if path.suffix == ".gz":
            (run / path.stem).write_bytes(gzip.decompress(path.read_bytes()))
        else:
            shutil.copy(path, run / path.name)
    return run


def _pair(planted_name: str, applied_name: str, kind: FindingKind, into: Path) -> tuple[Path, Path]:
    """The planted run and its rerun, the rerun's summary naming the finding it applies."""
    planted = _unpack(planted_name, into)
    applied = _unpack(applied_name, into)
    summary = json.loads((applied / "summary.json").read_text())
    summary["run"]["applies"] = f"{planted}:{kind.value}"
    (applied / "summary.json").write_text(json.dumps(summary))
    return planted, applied


@pytest.fixture(scope="module")
def budget_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _pair(
        "vllm-cpu-budget-planted",
        "vllm-cpu-budget-applied",
        FindingKind.BATCH_TOKEN_BUDGET,
        tmp_path_factory.mktemp("budget"),
    )


def test_the_planted_budget_binds_by_replay_and_the_roomy_cache_does_not(budget_pair):
    planted, _ = budget_pair
    diagnosis = diagnose_run(planted, DiagnoseOptions(engine="vllm"), write=False)
    top = diagnosis.findings[0]
    assert top.kind is FindingKind.BATCH_TOKEN_BUDGET and top.severity == "critical"
    lifted = [e for e in top.evidence if e.source == "twin replay"]
    assert lifted and "batch_tokens lifted from 32" in lifted[0].what, top.evidence
    assert {g.metric for g in top.expected_gains} >= {"median TTFT", "total throughput"}
    assert any("extrapolated" in m for m in top.missing), top.missing
    cache = next(f for f in diagnosis.findings if f.kind is FindingKind.KV_CAPACITY)
    assert cache.severity == "info" and "set but not binding" in cache.title


def test_every_gain_the_budget_action_stated_is_checked_by_its_rerun(budget_pair):
    _, applied = budget_pair
    diagnosis = diagnose_run(applied, DiagnoseOptions(engine="vllm"), write=False)
    checks = diagnosis.predictions
    assert len(checks) >= 2 and diagnosis.prediction == checks[0]
    for check in checks:
        assert check.measured is not None and check.low is not None, check.text
        assert check.verdict in ("inside", "within noise"), check.text


def test_a_capped_run_of_whole_answers_is_fitted_from_its_lone_requests_too(tmp_path: Path):
    """Answers that came whole, a cap of 2, and at 64 streams waits 50 times a lone
    request's time: fitted by each request's relative miss, the lone level is replayed as
    measured (unweighted, the waits decided every term: decode steps that cost nothing, the
    lone E2E 22% short, and the raised cap's gain 1.67x (1.39-1.93) against 3.65x)."""
    planted, applied = _pair(
        "vllm-cpu-cap-default", "vllm-cpu-cap-raised", FindingKind.RUNNING_REQUEST_CAP, tmp_path
    )
    first = diagnose_run(planted, DiagnoseOptions(engine="vllm"), write=True)
    assert first.findings[0].kind is FindingKind.RUNNING_REQUEST_CAP
    twin = RunDir(planted).load(TWIN_FILE, TwinResult)
    assert twin is not None and twin.fit.source == "end-to-end times"
    lone = twin.levels[0].metrics["median_e2e_latency_ms"].error
    assert lone is not None and abs(lone) < 0.1, lone
    checks = diagnose_run(applied, DiagnoseOptions(engine="vllm"), write=False).predictions
    assert checks
    for check in checks:
        assert check.verdict == "inside", check.text


def test_a_diagnosis_written_before_gains_were_a_list_still_loads():
    gain = {"factor": 2.0, "metric": "total throughput", "source": "model", "text": "2x"}
    old = {
        "kind": "kv_capacity",
        "title": "t",
        "severity": "warning",
        "confidence": 0.5,
        "evidence": [],
        "explanation": "e",
        "expected_gain": gain,
    }
    finding = Finding.model_validate(old)
    assert finding.expected_gains == [ExpectedGain.model_validate(gain)]


def test_what_if_prints_the_replay_at_the_value_asked(budget_pair):
    planted, _ = budget_pair
    done = subprocess.run(
        [
            *SERVELAB,
            "diagnose",
            str(planted),
            "--engine=vllm",
            "--json",
            "--what-if=max_batch_tokens=256",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["changes"] == {"batch_tokens": 256}
    ttft = [r for r in result["rows"] if r["metric"] == "median TTFT"]
    assert ttft and all(r["factor"] < 1 and r["low"] <= r["factor"] <= r["high"] for r in ttft)
    assert any("prefill up to 256" in why for why in result["extrapolated"])
    assert not (planted / "diagnosis.json").exists()


@pytest.mark.parametrize(
    ("asked", "says"),
    [("batch=4", "expected KNOB=VALUE"), ("max_batch_tokens=lots", "whole number")],
)
def test_a_what_if_it_cannot_read_is_one_line(budget_pair, asked: str, says: str):
    planted, _ = budget_pair
    done = subprocess.run(
        [*SERVELAB, "diagnose", str(planted), "--what-if", asked],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
