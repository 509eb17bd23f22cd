"""diagnose on the real vLLM: its running-request cap and its KV capacity, named and acted on.

Reuses the session's two vLLM engines and their sweeps; no launch or bench of its own.
"""

from __future__ import annotations

import pytest

from servelab.diagnose import DiagnoseOptions, diagnose_run


def test_the_capped_sweep_is_diagnosed_as_the_running_request_cap(vllm_capped_sweep):
    diagnosis = diagnose_run(vllm_capped_sweep.run_dir, DiagnoseOptions(engine="vllm"), write=True)
    top = diagnosis.findings[0]
    assert top.kind == "running_request_cap", [f.kind for f in diagnosis.findings]
    assert any("--max-num-seqs" in action.flags for action in top.actions), top.actions
    assert (vllm_capped_sweep.run_dir / "diagnosis.json").exists()


def test_the_kv_limited_engine_is_diagnosed_as_kv_capacity(vllm_kv_limited_sweep):
    diagnosis = diagnose_run(vllm_kv_limited_sweep.run_dir, DiagnoseOptions(engine="vllm"))
    assert diagnosis.findings[0].kind == "kv_capacity", [f.kind for f in diagnosis.findings]


@pytest.mark.timeout(1500)  # the fixture's two to four launches and sweeps
def test_a_small_step_budget_is_named_and_its_rerun_lands_in_the_interval(vllm_batch_runs):
    """vLLM with 64 batched tokens a step: the budget is the first finding, with vLLM's
    flag; the rerun with diagnose's budget measures a factor inside the stated interval, or
    one whose noise band (the two levels' own requests) reaches into it."""
    top = vllm_batch_runs.diagnosis.findings[0]
    assert top.kind == "batch_token_budget", [f.kind for f in vllm_batch_runs.diagnosis.findings]
    assert top.actions[0].flags[0] == "--max-num-batched-tokens", top.actions
    assert vllm_batch_runs.applied is not None
    check = diagnose_run(vllm_batch_runs.applied, DiagnoseOptions(engine="vllm")).prediction
    assert check is not None and check.measured is not None, check
    assert check.verdict in ("inside", "within noise"), check.text
