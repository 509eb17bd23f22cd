"""Real traces in tests/trace/data: two from an H200 (make_gpu_traces.py: ten decode steps,
eager and as a CUDA graph) and one from vLLM for CPUs (make_vllm_trace.py), against a plain
recount of their events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from servelab.trace import summarize_trace

DATA = Path(__file__).parent / "data"
STEPS = 10
KERNELS_PER_STEP = 257  # 64 layers x (mm, relu, mul, add), and the sum before .item()


VLLM_TRACE = DATA / "dp0_pp0_tp0_dcp0_ep0_rank0.1796144314365773617.pt.trace.json.gz"


def _workload(path: Path) -> list[dict]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e["cat"] not in ("Trace", "overhead")]


def _union(events: list[dict]) -> float:
    """Time covered by the events, by the plainest loop."""
    busy, end = 0.0, float("-inf")
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy


def _recount(path: Path) -> dict[str, float]:
    """Window, kernels and busy time with every event in memory."""
    workload = _workload(path)
    device = [e for e in workload if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = [e["dur"] for e in workload if e["cat"] == "kernel"]
    return {
        "window": max(e["ts"] + e["dur"] for e in workload) - min(e["ts"] for e in workload),
        "busy": _union(device),
        "kernels": len(kernels),
        "kernel_us": sum(kernels),
    }


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_numbers_match_a_plain_recount(mode: str):
    path = DATA / f"{mode}.pt.trace.json.gz"
    truth = _recount(path)
    s = summarize_trace(path, steps=STEPS, step_marker="^decode_step$")
    assert s.device and not s.notes
    assert s.window_us == pytest.approx(truth["window"], abs=1e-3)
    assert s.busy_us == pytest.approx(truth["busy"], abs=1e-3)
    assert s.kernels == truth["kernels"] == STEPS * KERNELS_PER_STEP
    assert s.kernel_us == pytest.approx(truth["kernel_us"], abs=1e-3)
    assert s.memcpys == STEPS
    assert s.per_step is not None and s.per_step.kernels == KERNELS_PER_STEP
    assert s.steps is not None and (s.steps.count, s.steps.decode) == (STEPS, STEPS)
    assert all(t.exclusive_us <= s.window_us for t in s.threads)
    assert [t.pid for t in s.threads] == ["452"]  # CUPTI's overhead row (pid -1) is not one


def test_the_graph_keeps_the_device_busier():
    eager = summarize_trace(DATA / "eager.pt.trace.json.gz", steps=STEPS)
    graph = summarize_trace(DATA / "graph.pt.trace.json.gz", steps=STEPS)
    assert eager.per_step is not None and graph.per_step is not None
    # Measured: 0.041 eager, 0.327 graph; kernel-busy 0.349 and 0.384 ms a step; 1.35 and
    # 1.49 µs a kernel on average.
    assert graph.busy_share > 5 * eager.busy_share
    assert graph.per_step.window_us < eager.per_step.window_us / 5
    assert 0.8 < graph.per_step.busy_us / eager.per_step.busy_us < 1.25
    assert [op.name for op in graph.top_host_ops[:2]] == [
        "cudaStreamSynchronize",
        "cudaGraphLaunch",
    ]
    assert eager.top_host_ops[1].name == "cudaLaunchKernel"


def test_a_vllm_cpu_trace():
    # Two requests of 4 tokens: the first prefilled alone, the second's prefill beside the
    # first's decode (mixed), two decodes of both, one of the second, then an empty step.
    s = summarize_trace(VLLM_TRACE)
    workload = _workload(VLLM_TRACE)
    assert not s.device and s.notes[0].startswith("CPU-only trace")
    assert s.busy_us == pytest.approx(_union([e for e in workload if e["cat"] == "cpu_op"]))
    assert s.steps is not None
    assert (s.steps.source, s.steps.count) == ("vllm", 6)
    assert (s.steps.prefill, s.steps.decode, s.steps.mixed, s.steps.other) == (1, 3, 1, 1)
    assert s.top_ops[0].name == "_C::onednn_mm"
    (worker,) = s.threads
    assert worker.name is not None and "VLLM::Worker" in worker.name
    # Kineto's CPU events nest properly: the exclusive sum is exactly the time covered.
    assert worker.exclusive_us == pytest.approx(_union(workload), abs=1e-3)
    assert worker.exclusive_us <= s.window_us
