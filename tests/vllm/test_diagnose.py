"""diagnose on the real vLLM: its running-request cap and its KV capacity, named and acted on.

Reuses the session's two vLLM engines and their sweeps; no launch or bench of its own.
"""

from __future__ import annotations

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
