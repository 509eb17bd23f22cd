"""CPU time of a launched engine: every process of its POSIX session, from /proc.

On a CPU engine the cores it keeps busy are what GPU utilization is on a GPU: the first
sign that a plateau is compute. The launcher starts each engine in a session of its own,
so summing utime + stime over the processes of that session counts its workers and
threads too, and nothing else. Read twice per level (its start and end); a process that
exits in between takes its time with it, so a level's figure is a floor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.processes import CLOCK_TICKS, all_proc_stats, usable_cpus

__all__ = ["EngineCpu", "EngineCpuMeter", "host_busy_s", "session_cpu_s"]

_PROC = Path("/proc")


class EngineCpu(BaseModel):
    """How many cores the engine's processes kept busy over one level, and the machine's."""

    model_config = ConfigDict(extra="forbid")

    cores: float = Field(description="CPU seconds of the engine's session / wall seconds.")
    host_busy_cores: float | None = Field(
        default=None,
        description="Cores the whole machine kept busy meanwhile (/proc/stat: all but idle "
        "and iowait), the engine, the load generator and anything else together.",
    )
    host_cores: int | None = Field(default=None, description="Cores this process may use.")
    wall_s: float = Field(description="Seconds between the two readings.")
    processes: int = Field(description="Processes of the session at the second reading.")
    source: str = Field(default="/proc/<pid>/stat utime + stime, over the engine's session")


def session_cpu_s(session_id: int, proc: Path = _PROC) -> tuple[float, int] | None:
    """(CPU seconds, process count) of the processes in `session_id`; None: no such session."""
    members = [stat for stat in all_proc_stats(proc) if stat.session == session_id]
    return (sum(stat.cpu_s for stat in members), len(members)) if members else None


def host_busy_s(proc: Path = _PROC, cpus: frozenset[int] | None = None) -> float | None:
    """CPU seconds the cores in `cpus` (default: those this process may run on) spent busy
    since boot, from /proc/stat's per-core lines; None without /proc."""
    usable = frozenset(usable_cpus()) if cpus is None else cpus
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return None
    busy, seen = 0, 0
    for line in lines:
        name, *values = line.split()
        if not name.startswith("cpu") or not name[3:].isdigit() or len(values) < 5:
            continue
        if usable is not None and int(name[3:]) not in usable:
            continue
        ticks = [int(value) for value in values[:8]]
        busy += sum(ticks) - ticks[3] - ticks[4]  # all but idle and iowait
        seen += 1
    return busy / CLOCK_TICKS if seen else None


@dataclass
class EngineCpuMeter:
    """Reads an engine session's CPU at a level's start and end."""

    session_id: int
    proc: Path = _PROC
    _start: tuple[float, float, float | None] | None = None

    def start(self) -> None:
        reading = session_cpu_s(self.session_id, self.proc)
        host = host_busy_s(self.proc)
        self._start = None if reading is None else (time.monotonic(), reading[0], host)

    def stop(self) -> EngineCpu | None:
        """The level's figure; None when the session was not there at either reading."""
        reading = session_cpu_s(self.session_id, self.proc)
        host = host_busy_s(self.proc)
        if self._start is None or reading is None:
            return None
        began, engine_s, host_s = self._start
        wall = time.monotonic() - began
        if wall <= 0:
            return None
        host_busy = None if host is None or host_s is None else max(0.0, host - host_s) / wall
        return EngineCpu(
            cores=max(0.0, reading[0] - engine_s) / wall,
            host_busy_cores=host_busy,
            host_cores=len(usable_cpus()),
            wall_s=wall,
            processes=reading[1],
        )
