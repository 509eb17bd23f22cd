"""SIGTERM and SIGHUP end a command the way Ctrl-C does.

What `timeout`, systemd and Kubernetes send must not lose a run: the handler raises
KeyboardInterrupt in the main thread, so the same path that keeps partial results on
Ctrl-C runs (in-flight requests cancelled and recorded, the summary written as
interrupted, a launched engine stopped), and the exit code says which signal it was.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["STOP_SIGNALS", "interrupt_exit_code", "stop_signals_interrupt"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise KeyboardInterrupt (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def interrupt_exit_code() -> int:
    """128 + the first stop signal received, else 130 (Ctrl-C's)."""
    return 128 + _received[0] if _received else 128 + signal.SIGINT


def _interrupt(signum: int, frame: FrameType | None) -> None:
    first = not _received
    _received.append(signum)
    if first:
        raise KeyboardInterrupt
