"""What is left of a POSIX session: every process whose session id is the one given.

The launcher starts each engine in a new session (its pid is the session id and its
process group). Stopping it signals the group; a process that moved to a group of its own
(setpgid, a daemonising child) is out of the group but still in the session, so a teardown
test that asks only whether the group is empty can miss it. These read /proc/*/stat.
"""

from __future__ import annotations

import time

from servelab.core.processes import all_proc_stats

__all__ = ["SESSION_WAIT_S", "session_left"]

SESSION_WAIT_S = 10.0
"""How long a test waits for the kernel to reap what was signalled."""


def session_left(sid: int, *, wait_s: float = SESSION_WAIT_S) -> list[str]:
    """The session's live processes (zombies hold nothing: not counted), as lines naming
    each, after waiting up to `wait_s` for them to go; [] when none is left."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [
            f"pid {stat.pid} (pgrp {stat.pgrp}, state {stat.state}) of session {sid}"
            for stat in all_proc_stats()
            if stat.session == sid and stat.state not in ("Z", "X")
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
