"""diagnose reads a profiled level's trace summaries as evidence: the real H200 traces of a
decode-like step (tests/trace/data, eager and as a CUDA graph) beside the committed H200
default run of the embedded engine."""

from __future__ import annotations

import shutil
from pathlib import Path

from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.trace_evidence import comm_evidence, kernel_evidence, launch_evidence
from servelab.store import RunDir
from servelab.trace import OpStat, summarize_trace

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "trace" / "data"
DEFAULT_RUN = REPO / "benchmarks" / "gpu" / "results" / "h200-diagnose" / "default"


def _launch(finding_kinds: list[str]) -> int:
    return finding_kinds.index("launch_overhead")


def test_an_idle_device_of_short_kernels_supports_launch_overhead(tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(DEFAULT_RUN, run)
    eager = summarize_trace(TRACES / "eager.pt.trace.json.gz")
    assert eager.device and eager.busy_share < 0.5
    RunDir(run).write_json("trace_summary.json", [eager.model_dump(mode="json", by_alias=True)])
    diagnosis = diagnose_run(run, DiagnoseOptions(), write=False)
    finding = diagnosis.findings[_launch([f.kind for f in diagnosis.findings])]
    traced = [e for e in finding.evidence if e.source.startswith("trace_summary.json")]
    assert [e.what for e in traced] == [
        "device busy in the profiled window",
        "kernels in the window, and their mean duration",
    ]
    assert all(e.supports for e in traced)
    without = diagnose_run(DEFAULT_RUN, DiagnoseOptions(), write=False)
    before = without.findings[_launch([f.kind for f in without.findings])]
    assert finding.confidence > before.confidence


def test_a_busy_device_is_evidence_against_and_collectives_and_gemms_are_named():
    graph = summarize_trace(TRACES / "graph.pt.trace.json.gz")
    busy = graph.model_copy(update={"busy_share": 0.9})
    supports, against = launch_evidence([busy])
    assert supports == [] and [e.supports for e in against] == [False]
    allreduce = OpStat(
        name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        category="kernel",
        count=300,
        total_us=5000.0,
        mean_us=16.7,
        window_share=0.4,
    )
    moe = allreduce.model_copy(update={"name": "fused_moe_kernel", "window_share": 0.35})
    (comm,) = comm_evidence([graph.model_copy(update={"top_ops": [allreduce]})])
    assert comm.value == 40 and comm.unit == "% of the window"
    assert comm_evidence([graph.model_copy(update={"top_ops": [moe]})]) == []
    (gemm,) = kernel_evidence([graph.model_copy(update={"top_ops": [moe]})])
    assert "fused_moe_kernel" in gemm.what
    cpu_only = graph.model_copy(update={"device": False})
    assert launch_evidence([cpu_only]) == ([], []) and comm_evidence([cpu_only]) == []
