"""diagnose on the real vLLM: its running-request cap and its KV capacity, named and acted on.

Reuses the session's two vLLM engines and the capped sweep; no launch of its own.
"""

from __future__ import annotations

from pathlib import Path

from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.trial import for_engine
from servelab.bench.workload import WorkloadSpec
from servelab.diagnose import DiagnoseOptions, diagnose_run
from tests.vllm.conftest import VllmEngine


def test_the_capped_sweep_is_diagnosed_as_the_running_request_cap(vllm_capped_sweep):
    diagnosis = diagnose_run(vllm_capped_sweep.run_dir, DiagnoseOptions(engine="vllm"), write=True)
    top = diagnosis.findings[0]
    assert top.kind == "running_request_cap", [f.kind for f in diagnosis.findings]
    assert any("--max-num-seqs" in action.flags for action in top.actions), top.actions
    assert (vllm_capped_sweep.run_dir / "diagnosis.json").exists()


def test_the_kv_limited_engine_is_diagnosed_as_kv_capacity(
    vllm_kv_limited: VllmEngine, tmp_path: Path
):
    config = for_engine(
        BenchConfig(
            url=vllm_kv_limited.engine.url,
            levels=[2.0, 32.0],
            duration_s=8.0,
            warmup=1,
            stream=False,
            workload=WorkloadSpec(input_len=64, output_len=256, range_ratio=0.5),
            out=tmp_path / "run",
        ),
        vllm_kv_limited.engine,
        metrics=True,
    )
    outcome = run_bench(config, log_stats=vllm_kv_limited.watched.log_stats)
    diagnosis = diagnose_run(outcome.run_dir, DiagnoseOptions(engine="vllm"))
    assert diagnosis.findings[0].kind == "kv_capacity", [f.kind for f in diagnosis.findings]
