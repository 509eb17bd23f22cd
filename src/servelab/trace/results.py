"""The summary of one trace file: what `servelab trace` prints and `--json` writes.

Times are µs, as in the trace; a `*_share` is a fraction of the window (0 to 1). Each
field's definition is in its description and in docs/TRACE.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SCHEMA",
    "GapCause",
    "Gaps",
    "LongGap",
    "OpStat",
    "PerStep",
    "StepSource",
    "StepStats",
    "ThreadTotal",
    "TraceSummary",
    "round_us",
]

SCHEMA = "servelab.trace/1"

StepSource = Literal["vllm", "sglang", "profiler", "custom"]
"""Whose step annotation was recognised (see servelab.trace.steps)."""


def round_us(value: float) -> float:
    """µs to the nanosecond, the trace's own resolution."""
    return round(float(value), 3)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OpStat(_Frozen):
    """One kernel or op name, over the whole trace."""

    name: str
    category: str = Field(description="The trace's `cat`: kernel, gpu_memcpy, cpu_op, ...")
    count: int
    total_us: float = Field(
        description="Sum of exclusive times: a device event's duration; a host op's own "
        "duration minus its direct children's on its thread."
    )
    mean_us: float = Field(description="total_us / count.")
    window_share: float = Field(description="total_us / window_us.")


class LongGap(_Frozen):
    """One idle gap of at least the long-gap threshold, and what the host did before it."""

    start_us: float = Field(description="Where it begins, from the window's start.")
    dur_us: float
    op_before: str | None = Field(
        description="The host op (cpu_op or user_annotation, any thread) that started last "
        "before the gap began; None when none did."
    )


class GapCause(_Frozen):
    """A host op that preceded long gaps, with how many and how long they were."""

    op: str
    count: int
    total_us: float


class Gaps(_Frozen):
    """Idle time inside the busy span: the gaps between merged busy intervals."""

    count: int = Field(description="Gaps between consecutive merged busy intervals.")
    total_us: float = Field(description="Their sum: span_us - busy_us.")
    longest_us: float = Field(description="0 when there is no gap.")
    long_threshold_us: float = Field(description="A gap this long or longer is long.")
    long_count: int
    long_total_us: float
    longest: list[LongGap] = Field(description="The longest long gaps, longest first.")
    causes: list[GapCause] = Field(
        description="The host ops before long gaps (op_before), by total gap time."
    )


class ThreadTotal(_Frozen):
    """One host thread's exclusive times summed; never more than the window."""

    pid: str
    tid: str
    name: str | None = Field(description="The trace's thread_name, when it has one.")
    events: int
    exclusive_us: float = Field(
        description="Sum of its events' exclusive times: the time the thread was inside "
        "some event (an event that outlives its parent cut at the parent's end)."
    )
    window_share: float = Field(description="exclusive_us / window_us, at most 1.")


class StepStats(_Frozen):
    """Engine steps found by their annotations (see docs/TRACE.md for the names)."""

    source: StepSource
    marker: str = Field(description="The annotation recognised, e.g. SGLang step[MODE bs=N].")
    count: int
    prefill: int
    decode: int
    mixed: int = Field(description="Steps with both prefill and decode requests.")
    other: int = Field(description="Steps whose kind the marker does not tell.")
    mean_us: float = Field(description="Mean duration of a marker's annotation.")
    prefill_mean_us: float | None
    decode_mean_us: float | None


class PerStep(_Frozen):
    """The window's totals divided by a number of steps: a caller's, or the markers'."""

    steps: int
    source: Literal["given", "markers"]
    window_us: float
    busy_us: float
    kernels: float = Field(description="Kernel events per step.")
    kernel_us: float = Field(description="Sum of kernel durations per step.")
    device_events: float = Field(description="Kernel, memcpy and memset events per step.")


class TraceSummary(_Frozen):
    """A streaming summary of one Chrome/Kineto trace file."""

    schema_: str = Field(default=SCHEMA, alias="schema")
    file: str
    events_read: int = Field(description="Items of traceEvents read (all phases).")
    complete_events: int = Field(
        description="Of them, the workload's complete events (ph X): the profiler's own "
        "(cat Trace, overhead) excepted."
    )
    truncated: bool = Field(description="The file ended early; what was read is summarised.")
    window_us: float = Field(
        description="First start to last end over the workload's complete events."
    )
    device: bool = Field(description="Any kernel, memcpy or memset event.")
    busy_basis: Literal["device", "cpu_op"] = Field(
        description="device: union of kernel, memcpy and memset intervals (HTA's busy); "
        "cpu_op: union of CPU ops over all threads, on a CPU-only trace."
    )
    busy_us: float
    busy_share: float = Field(description="busy_us / window_us.")
    span_us: float = Field(description="First busy start to last busy end (HTA's kernel time).")
    span_busy_share: float = Field(description="busy_us / span_us: 1 - HTA's idle share.")
    kernels: int
    memcpys: int
    memsets: int
    kernel_us: float = Field(description="Sum of kernel durations (overlaps counted twice).")
    mean_kernel_us: float | None = Field(description="kernel_us / kernels.")
    top_ops: list[OpStat] = Field(
        description="By total exclusive time: device events on a GPU trace, CPU ops else."
    )
    top_host_ops: list[OpStat] = Field(
        description="On a GPU trace, the host ops (cpu_op, cuda_runtime, cuda_driver) by "
        "exclusive time; empty on a CPU-only trace, whose top_ops are these."
    )
    gaps: Gaps
    threads: list[ThreadTotal] = Field(description="Host threads, most exclusive time first.")
    steps: StepStats | None
    per_step: PerStep | None
    categories: dict[str, int] = Field(
        description="Complete events per category, the profiler's own included."
    )
    notes: list[str]

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
