"""Summaries of torch-profiler (Chrome/Kineto) traces, read as a stream.

`summarize_trace` reads one file (gzip or plain, item by item with ijson, so a 50 MB
trace is never held whole) and returns a `TraceSummary`: the device-busy share of the
window (Holistic Trace Analysis's union of kernel, memcpy and memset intervals), the top
kernels or ops by exclusive time, idle gaps with the host op before each long one, host
threads' exclusive totals, and prefill and decode steps where vLLM or SGLang mark them.
`summarize_traces` does the same for every trace file of a folder (an engine's ranks).

Depends on `core` only; `diagnose` and `report` may use it.
"""

from servelab.trace.results import (
    SCHEMA,
    GapCause,
    Gaps,
    LongGap,
    OpStat,
    PerStep,
    StepStats,
    ThreadTotal,
    TraceSummary,
)
from servelab.trace.steps import MARKERS, StepMarker
from servelab.trace.summary import (
    DEFAULT_LONG_GAP_US,
    DEFAULT_TOP,
    summarize_trace,
    summarize_traces,
    trace_files,
)

__all__ = [
    "DEFAULT_LONG_GAP_US",
    "DEFAULT_TOP",
    "MARKERS",
    "SCHEMA",
    "GapCause",
    "Gaps",
    "LongGap",
    "OpStat",
    "PerStep",
    "StepMarker",
    "StepStats",
    "ThreadTotal",
    "TraceSummary",
    "summarize_trace",
    "summarize_traces",
    "trace_files",
]
