"""Signalling a whole process group: how servelab stops what it started, children too."""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["group_alive", "signal_group"]


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
