"""Signalling a whole process group, children that end with their parent, and /proc/PID/stat.

How servelab stops what it started, children too, and how a child it started makes sure
it never outlives servelab: a worker left behind by a SIGKILLed parent holds its pipes,
its port and its share of the CPU until someone finds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLOCK_TICKS",
    "PARENT_POLL_S",
    "ProcStat",
    "all_proc_stats",
    "describe_exit",
    "die_with_parent",
    "group_alive",
    "proc_stat",
    "request_parent_death_signal",
    "session_members",
    "signal_group",
    "usable_cpus",
]

PARENT_POLL_S = 0.25
"""How often a child checks its parent is alive where the kernel cannot tell it."""

_PR_SET_PDEATHSIG = 1
_PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Clock ticks per second: the unit of /proc's CPU times."""


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of /proc/PID/stat that say who a process belongs to, what it costs and
    when it started."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    user_s: float
    system_s: float
    start_ticks: int | None
    """Field 22, starttime: clock ticks after boot. With the pid it names one process (a
    pid is reused, never with the same start); None for a line cut short of it (the kernel
    writes all 52 fields; a hand-written line in a test need not)."""

    @property
    def cpu_s(self) -> float:
        """utime + stime, in seconds."""
        return self.user_s + self.system_s


def proc_stat(pid: int, proc: Path = _PROC) -> ProcStat | None:
    """One process's stat line; None once it is gone (or on a system without /proc)."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 13:
        return None
    return ProcStat(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        user_s=int(fields[11]) / CLOCK_TICKS,
        system_s=int(fields[12]) / CLOCK_TICKS,
        start_ticks=int(fields[19]) if len(fields) > 19 else None,
    )


def session_members(session_id: int, proc: Path = _PROC) -> list[int]:
    """Live processes of a POSIX session (zombies hold nothing and are not counted)."""
    return [
        stat.pid
        for stat in all_proc_stats(proc)
        if stat.session == session_id and stat.state not in ("Z", "X")
    ]


def all_proc_stats(proc: Path = _PROC) -> Iterator[ProcStat]:
    """Every process's stat, skipping those that exit while they are read."""
    for entry in proc.iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name), proc)) is not None:
            yield stat


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to every process of the group; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (one we may not signal counts as alive)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe_exit(code: int) -> str:
    """`exit code 3`, or `signal SIGKILL` for Popen's negative return codes."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def request_parent_death_signal(sig: signal.Signals = signal.SIGKILL) -> bool:
    """Ask Linux to send `sig` when the parent exits (prctl PR_SET_PDEATHSIG).

    Safe in a `preexec_fn`: the request survives exec. Returns False where the kernel has
    no such call (not Linux), so the caller knows to watch the parent itself.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig)) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Make this (Python) child end within about a second of its parent's death.

    Two ways, because neither is enough alone: the kernel's death signal (Linux), and a
    daemon thread that polls the parent's pid (every platform, and the case where the
    parent died before the request was made).
    """
    request_parent_death_signal(sig)
    if os.getppid() != parent_pid:
        os._exit(128 + int(sig))
    thread = threading.Thread(
        target=_watch_parent, args=(parent_pid, sig), name="servelab-parent-watch", daemon=True
    )
    thread.start()


def _watch_parent(parent_pid: int, sig: signal.Signals) -> None:
    stopped = threading.Event()
    while not stopped.wait(PARENT_POLL_S):
        if os.getppid() != parent_pid:
            os._exit(128 + int(sig))


def usable_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity), in order; every CPU where the
    platform keeps no affinity."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))
