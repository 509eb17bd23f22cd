"""A real torch-profiler trace (CPU ops, made here): per thread, exclusive times sum to no more
than the window, and each op's exclusive total is the profiler's own self CPU time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.trace import summarize_trace
from tests.ci import require_module

require_module("torch")

# vLLM's step annotation (vllm/v1/worker/gpu_worker.py) around one prefill and three decodes.
SCRIPT = """
import json, sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function

weight = torch.randn(128, 128)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    with record_function("execute_context_1(32)_generation_0(0)"):
        torch.nn.functional.linear(torch.randn(32, 128), weight).softmax(-1)
    for _ in range(3):
        with record_function("execute_context_0(0)_generation_1(1)"):
            torch.nn.functional.linear(torch.randn(1, 128), weight).softmax(-1).argmax()
prof.export_chrome_trace(sys.argv[1])
print(json.dumps({e.key: [e.count, e.self_cpu_time_total] for e in prof.key_averages()}))
"""


@pytest.fixture(scope="module")
def torch_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[float]]]:
    path = tmp_path_factory.mktemp("torch") / "cpu.pt.trace.json"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, check=True
    )
    return path, json.loads(done.stdout.strip().splitlines()[-1])


def test_exclusive_sums_per_thread_are_at_most_the_window(torch_trace):
    path, _ = torch_trace
    summary = summarize_trace(path)
    assert not summary.device and summary.busy_basis == "cpu_op"
    assert summary.threads
    for thread in summary.threads:
        assert 0 < thread.exclusive_us <= summary.window_us
    assert summary.busy_us <= summary.window_us


def test_op_totals_are_the_profilers_self_cpu_time(torch_trace):
    path, averages = torch_trace
    summary = summarize_trace(path, top=100)
    assert summary.top_ops
    for op in summary.top_ops:
        count, self_us = averages[op.name]
        assert op.count == count
        assert op.total_us == pytest.approx(self_us, abs=0.01)


def test_vllm_step_markers_in_a_real_trace(torch_trace):
    path, _ = torch_trace
    steps = summarize_trace(path).steps
    assert steps is not None
    assert (steps.source, steps.count, steps.prefill, steps.decode) == ("vllm", 4, 1, 3)
