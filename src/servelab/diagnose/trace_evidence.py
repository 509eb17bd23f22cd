"""What a profiled level's trace summaries (trace_summary.json) say, as rule evidence.

A GPU trace whose device is busy a small share of the window while its kernels are short
supports `launch_overhead` (the host leaves the GPU waiting between launches); one whose
top device event is a collective supports `comm_latency`; one dominated by an MoE or
matrix kernel is shown beside `memory_bound`. CPU-only traces (a CPU build of an engine)
say nothing about a GPU and bring no evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from servelab.diagnose.findings import Evidence
from servelab.diagnose.signals import fmt
from servelab.trace import TraceSummary

__all__ = ["comm_evidence", "kernel_evidence", "launch_evidence"]

IDLE_BUSY_SHARE = 0.5
"""Under this share of the window busy, the device mostly waits."""
SHORT_KERNEL_US = 20.0
"""Kernels this short cost less to run than an eager launch on the host takes."""
DOMINANT_SHARE = 0.2
"""A device event with this share of the window is the step's largest cost."""
_COLLECTIVE = re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|cross_device", re.I)
_MATRIX = re.compile(r"moe|gemm|gemv|matmul|cutlass|sm\d+_xmma|triton_.*mm", re.I)


def launch_evidence(traces: Sequence[TraceSummary]) -> tuple[list[Evidence], list[Evidence]]:
    """(evidence for launch overhead, evidence against it: a busy device)."""
    supports: list[Evidence] = []
    against: list[Evidence] = []
    for trace in _device(traces):
        busy = Evidence(
            what="device busy in the profiled window",
            value=fmt(100 * trace.busy_share),
            unit="%",
            source=_source(trace),
        )
        mean = trace.mean_kernel_us
        if trace.busy_share < IDLE_BUSY_SHARE and mean is not None and mean < SHORT_KERNEL_US:
            supports += [
                busy,
                Evidence(
                    what="kernels in the window, and their mean duration",
                    value=f"{trace.kernels:,} of {fmt(mean)} us",
                    source=_source(trace),
                ),
            ]
        elif trace.busy_share >= IDLE_BUSY_SHARE:
            busy.supports = False
            against.append(busy)
    return supports, against


def comm_evidence(traces: Sequence[TraceSummary]) -> list[Evidence]:
    """A collective as the top device event of a GPU trace."""
    return _top_event(traces, _COLLECTIVE)


def kernel_evidence(traces: Sequence[TraceSummary]) -> list[Evidence]:
    """An MoE or matrix kernel as the top device event: where the bytes are read."""
    return _top_event(traces, _MATRIX)


def _top_event(traces: Sequence[TraceSummary], pattern: re.Pattern[str]) -> list[Evidence]:
    """The top device event of each GPU trace, where its name matches and it dominates."""
    return [
        Evidence(
            what=f"top device event {op.name[:80]!r}",
            value=fmt(100 * op.window_share),
            unit="% of the window",
            source=_source(trace),
        )
        for trace in _device(traces)
        for op in trace.top_ops[:1]
        if pattern.search(op.name) and op.window_share >= DOMINANT_SHARE
    ]


def _device(traces: Sequence[TraceSummary]) -> list[TraceSummary]:
    return [t for t in traces if t.device and t.window_us > 0]


def _source(trace: TraceSummary) -> str:
    return f"trace_summary.json: {trace.file.rsplit('/', 1)[-1]}"
