"""A torch profile of one level on the real vLLM (CPU): started over HTTP, its stop never
waited on, its trace files found by polling and summarised, the level's results intact.

It profiles the session's KV-limited engine, after every other test that uses it (files
run in name order), and the session's teardown then proves that stopping an engine whose
/stop_profile may still be pending leaves no process behind (the fixture checks).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from servelab.bench.profile import ProfilePlan
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.trial import PROFILE_DIR, for_engine
from servelab.bench.workload import WorkloadSpec
from servelab.engines.profiler import VLLM_PROFILER
from servelab.trace import TraceSummary
from tests.vllm.conftest import VllmEngine


def test_a_profiled_level_on_vllm_is_summarised_and_its_results_kept(
    vllm_kv_limited: VllmEngine, tmp_path: Path
):
    engine = vllm_kv_limited.engine
    folder = Path(json.loads(_config_flag(engine.command))["torch_profiler_dir"])
    assert folder.name == PROFILE_DIR
    plan = ProfilePlan(
        level=2.0,
        folder=folder,
        window_s=1.0,
        support=VLLM_PROFILER,
        url=engine.url,
        files_timeout_s=300,
    )
    config = for_engine(
        BenchConfig(
            url=engine.url,
            levels=[2.0],
            duration_s=6.0,
            warmup=1,
            stream=False,
            workload=WorkloadSpec(input_len=64, output_len=32),
            out=tmp_path / "run",
            torch_profile=plan,
        ),
        engine,
        metrics=False,
    )
    started = time.monotonic()
    (level,) = run_bench(config).summary.levels
    assert time.monotonic() - started < 330
    assert level.completed and level.completed > 4 and level.failed == 0
    assert level.notes[-1].startswith("torch profile: complete (")
    record = json.loads((tmp_path / "run" / "profile.json").read_text())
    assert record["status"] == "complete" and record["bytes"] > 0
    assert any("rank0" in name for name in record["files"])
    documents = json.loads((tmp_path / "run" / "trace_summary.json").read_text())
    # A front-end trace (async_llm), where vLLM writes one, may hold no complete event: an
    # entry with its error, beside the rank's summary.
    summaries = [TraceSummary.model_validate(d) for d in documents if "error" not in d]
    rank = next(s for s in summaries if "rank0" in s.file)
    assert not rank.device and rank.events_read > 1000
    assert rank.top_ops and rank.window_us > 0
    for thread in rank.threads:
        assert thread.exclusive_us <= rank.window_us * (1 + 1e-9), thread


def _config_flag(command: list[str]) -> str:
    return command[command.index("--profiler-config") + 1]
