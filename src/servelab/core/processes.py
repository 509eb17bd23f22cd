"""Signalling a whole process group, and children that end with their parent.

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

__all__ = [
    "PARENT_POLL_S",
    "describe_exit",
    "die_with_parent",
    "group_alive",
    "request_parent_death_signal",
    "signal_group",
]

PARENT_POLL_S = 0.25
"""How often a child checks its parent is alive where the kernel cannot tell it."""

_PR_SET_PDEATHSIG = 1


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
