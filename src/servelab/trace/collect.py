"""Streaming a trace's events into compact columns: what the summary needs, nothing more.

An event dict is dropped as soon as its numbers are copied out: start and duration as
8-byte floats and its (name, category) as a 4-byte key, per host thread and for the
device. A 400,000-event trace then takes about 8 MB, where its dicts take 340 MB.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from servelab.trace.steps import StepCounter

__all__ = [
    "BUSY_KINDS",
    "Columns",
    "TraceCollector",
]

BUSY_KINDS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
}
"""Categories that keep a device busy (lower case; torch before 1.9 wrote Memcpy, Memset)."""
_DEVICE_ROW = {"gpu_user_annotation", "cuda_sync"}
"""Device-row categories that are not device work: annotations mirrored there, syncs."""
_PROFILER_OWN = {"trace", "overhead"}
"""Kineto's own events: its session span (pid "Spans") and CUPTI's buffer requests
(pid -1), counted by category but not the workload's (no window, thread or busy time)."""
_MARKER_CATEGORIES = {"user_annotation", "cpu_op"}


class Columns:
    """Start µs, duration µs and (name, category) key of a list of events."""

    def __init__(self) -> None:
        self.ts = array("d")
        self.dur = array("d")
        self.key = array("i")

    def append(self, ts: float, dur: float, key: int) -> None:
        self.ts.append(ts)
        self.dur.append(dur)
        self.key.append(key)

    def __len__(self) -> int:
        return len(self.ts)

    def arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[Any]]:
        """Numpy views of the columns (no copy)."""
        return (
            np.frombuffer(self.ts, dtype=np.float64),
            np.frombuffer(self.dur, dtype=np.float64),
            np.frombuffer(self.key, dtype=np.intc),
        )


class TraceCollector:
    """Takes events one at a time (`add`) and keeps their columns, names and counts."""

    def __init__(self, steps: StepCounter) -> None:
        self.steps = steps
        self.keys: dict[tuple[str, str], int] = {}
        """(name, category) -> key; `names` is the inverse."""
        self.names: list[tuple[str, str]] = []
        self.device = Columns()
        self.host: dict[tuple[str, str], Columns] = {}
        """(pid, tid) -> that thread's host events."""
        self.device_pids: set[str] = set()
        self.thread_names: dict[tuple[str, str], str] = {}
        self.categories: Counter[str] = Counter()
        self.busy_kinds: Counter[str] = Counter()
        self.complete = 0
        self.skipped = 0
        """Complete events without a numeric start or duration."""
        self.unpaired = 0
        """Begin/end (ph B/E) events, which are not paired here."""
        self.start_us = float("inf")
        self.end_us = float("-inf")

    def add(self, event: dict[str, Any]) -> None:
        """Keep what the summary needs of one event."""
        phase = event.get("ph")
        if phase == "X":
            self._complete(event)
        elif phase == "M":
            self._metadata(event)
        elif phase in ("B", "E"):
            self.unpaired += 1

    def _complete(self, event: dict[str, Any]) -> None:
        ts, dur = event.get("ts"), event.get("dur", 0.0)
        if not isinstance(ts, int | float) or not isinstance(dur, int | float):
            self.skipped += 1
            return
        category = str(event.get("cat") or "")
        lowered = category.lower()
        self.categories[category] += 1
        if lowered in _PROFILER_OWN:
            return
        dur = max(float(dur), 0.0)
        ts = float(ts)
        self.complete += 1
        self.start_us = min(self.start_us, ts)
        self.end_us = max(self.end_us, ts + dur)
        name = str(event.get("name") or "")
        pid = str(event.get("pid"))
        busy = BUSY_KINDS.get(lowered)
        if busy is not None:
            self.busy_kinds[busy] += 1
            self.device_pids.add(pid)
            self.device.append(ts, dur, self._key(name, category))
            return
        if lowered in _DEVICE_ROW:
            self.device_pids.add(pid)
            return
        thread = (pid, str(event.get("tid")))
        columns = self.host.get(thread)
        if columns is None:
            columns = self.host[thread] = Columns()
        columns.append(ts, dur, self._key(name, category))
        if lowered in _MARKER_CATEGORIES:
            self.steps.see(name, dur)

    def _metadata(self, event: dict[str, Any]) -> None:
        args = event.get("args")
        if event.get("name") == "thread_name" and isinstance(args, dict) and "name" in args:
            thread = (str(event.get("pid")), str(event.get("tid")))
            self.thread_names[thread] = str(args["name"]).strip()

    def _key(self, name: str, category: str) -> int:
        pair = (name, category)
        key = self.keys.get(pair)
        if key is None:
            key = self.keys[pair] = len(self.names)
            self.names.append(pair)
        return key

    def host_threads(self) -> dict[tuple[str, str], Columns]:
        """Threads of host processes: a device's rows (pid = the device) are left out."""
        return {t: c for t, c in self.host.items() if t[0] not in self.device_pids}
