"""Synthetic Chrome/Kineto traces with known answers, written the way torch writes them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

HOST_PID = 4242
HOST_TID = 4242
DEVICE_PID = 0


def x(
    name: str,
    cat: str,
    ts: float,
    dur: float,
    *,
    pid: int | str = HOST_PID,
    tid: int | str = HOST_TID,
    **args: Any,
) -> dict[str, Any]:
    """A complete (ph X) event."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def kernel(name: str, ts: float, dur: float, *, stream: int = 7) -> dict[str, Any]:
    return x(name, "kernel", ts, dur, pid=DEVICE_PID, tid=stream, device=0, stream=stream)


def memcpy(ts: float, dur: float, *, stream: int = 7) -> dict[str, Any]:
    return x(
        "Memcpy DtoH (Device -> Pinned)",
        "gpu_memcpy",
        ts,
        dur,
        pid=DEVICE_PID,
        tid=stream,
        device=0,
        stream=stream,
    )


def memset(ts: float, dur: float, *, stream: int = 7) -> dict[str, Any]:
    return x(
        "Memset (Device)",
        "gpu_memset",
        ts,
        dur,
        pid=DEVICE_PID,
        tid=stream,
        device=0,
        stream=stream,
    )


def cpu_op(name: str, ts: float, dur: float, *, tid: int = HOST_TID) -> dict[str, Any]:
    return x(name, "cpu_op", ts, dur, tid=tid)


def annotation(name: str, ts: float, dur: float, *, tid: int = HOST_TID) -> dict[str, Any]:
    return x(name, "user_annotation", ts, dur, tid=tid)


def thread_name(name: str, *, pid: int = HOST_PID, tid: int = HOST_TID) -> dict[str, Any]:
    return {
        "ph": "M",
        "name": "thread_name",
        "pid": pid,
        "tid": tid,
        "ts": 0,
        "args": {"name": name},
    }


def profiler_span(ts: float, dur: float) -> dict[str, Any]:
    """Kineto's own session span, which is not the workload's window."""
    return x("PyTorch Profiler (0)", "Trace", ts, dur, pid="Spans", tid="PyTorch Profiler")


def write_trace(
    path: Path, events: list[dict[str, Any]], *, gz: bool = False, bare_array: bool = False
) -> Path:
    """Write `events` as torch does (an object with traceEvents), or as a bare array."""
    document: Any = (
        events
        if bare_array
        else {
            "schemaVersion": 1,
            "deviceProperties": [],
            "displayTimeUnit": "ms",
            "traceEvents": events,
        }
    )
    text = json.dumps(document, indent=1).encode()
    if gz:
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path
