"""diagnose on the real vLLM, one planted limit each: its running-request cap and its KV
capacity named first and acted on, and the cache action's predicted gain checked by a
second run that applied it (the cap action's is checked by the tuning study's second
trial, tests/vllm/test_tune.py).

Reuses the session's vLLM engines and their sweeps; no launch or bench of its own.
"""

from __future__ import annotations

from servelab.bench.session import BenchOutcome
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.findings import FindingKind
from tests.vllm.conftest import Rerun


def _check(rerun: Rerun):
    diagnosis = diagnose_run(rerun.applied.run_dir, DiagnoseOptions(engine="vllm"))
    check = diagnosis.prediction
    assert check is not None and check.applies.endswith(f":{rerun.finding.kind.value}"), check
    assert check.measured is not None and check.low is not None and check.high is not None
    return diagnosis, check


def test_the_capped_sweep_is_diagnosed_as_the_running_request_cap(
    vllm_capped_sweep: BenchOutcome,
):
    diagnosis = diagnose_run(vllm_capped_sweep.run_dir, DiagnoseOptions(engine="vllm"), write=True)
    top = diagnosis.findings[0]
    assert top.kind == "running_request_cap", [f.kind for f in diagnosis.findings]
    assert any("--max-num-seqs" in action.flags for action in top.actions), top.actions
    assert (vllm_capped_sweep.run_dir / "diagnosis.json").exists()


def test_the_kv_limited_engine_is_diagnosed_as_kv_capacity(vllm_kv_limited_sweep: BenchOutcome):
    diagnosis = diagnose_run(vllm_kv_limited_sweep.run_dir, DiagnoseOptions(engine="vllm"))
    assert diagnosis.findings[0].kind == "kv_capacity", [f.kind for f in diagnosis.findings]


def test_the_cache_kv_capacity_asked_for_gives_the_gain_it_predicted(vllm_kv_rerun: Rerun):
    diagnosis, check = _check(vllm_kv_rerun)
    assert check.verdict == "inside", check.text
    kv = [f for f in diagnosis.findings if f.kind is FindingKind.KV_CAPACITY]
    assert not kv or kv[0].severity != "critical", "the cache it asked for still binds"
