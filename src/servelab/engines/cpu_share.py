"""The load generator's share of a CPU machine, kept when servelab launches a CPU engine.

An engine on the CPU and the load generator measuring it run on the same cores. torch's
OpenMP threads spin while they wait, and vLLM's scheduler process polls its worker in a
`sched_yield` loop; given every core they starve the client and the engine's own HTTP
server, and the run measures the starvation instead of the engine. So a launched CPU
engine gets the first half of the cores this process may use for its compute threads
(at least one) and its busy-waiting scheduler runs at a lower priority; the rest is the
client's. On one core there is nothing to leave: the share says so, and the run's CPU
findings read the numbers.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from servelab.core.processes import session_members, usable_cpus

__all__ = [
    "SCHEDULER_NICE",
    "CpuShare",
    "engine_cpu_share",
    "lower_priority",
]

SCHEDULER_NICE = 10
"""A busy-waiting scheduler's nice value: at 10 the kernel gives an un-niced thread on the
same core about ten times its share (CFS weights 1024 against 110), so the client and the
engine's HTTP server run whenever they have work while the spin still runs between."""

_PROC = Path("/proc")


@dataclass(frozen=True)
class CpuShare:
    """Which cores a launched CPU engine computes on and which are left to the client."""

    engine: tuple[int, ...]
    client: tuple[int, ...]

    @property
    def starved(self) -> bool:
        """No core is left to the load generator: the engine and the client share all."""
        return not self.client

    def as_record(self) -> dict[str, object]:
        return {"engine_cpus": list(self.engine), "client_cpus": list(self.client)}


def engine_cpu_share(cpus: tuple[int, ...] | None = None) -> CpuShare:
    """The first half of `cpus` (the usable ones by default) for the engine, at least one;
    the rest for the client."""
    cpus = usable_cpus() if cpus is None else cpus
    half = max(1, len(cpus) // 2)
    return CpuShare(engine=cpus[:half], client=cpus[half:])


def lower_priority(session_id: int, names: tuple[bytes, ...], nice: int) -> list[int]:
    """Every thread of the session's processes whose command line starts with one of
    `names`, set to `nice`; the pids changed. A process that exits meanwhile is skipped."""
    changed = []
    for pid in session_members(session_id):
        try:
            if not (_PROC / str(pid) / "cmdline").read_bytes().startswith(names):
                continue
            for task in (_PROC / str(pid) / "task").iterdir():
                with contextlib.suppress(ProcessLookupError):
                    os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
        except OSError:
            continue
        changed.append(pid)
    return changed
