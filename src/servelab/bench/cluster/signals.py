"""Ctrl-C, SIGTERM and SIGHUP held back while Ray calls are under way, delivered between.

Python raises KeyboardInterrupt wherever the main thread is when the signal comes; inside
a Ray call (a Ray Client call above all) that can leave the connection waiting for an
answer that never arrives, and the run's clean-up then hangs. Held here, a signal is
handed to the handler that was in place (servelab's own, which raises
KeyboardInterrupt) at the next `deliver()`: the pool calls it between polls, so a stop
still takes effect within one poll.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["deferred_signals"]

_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def deferred_signals() -> Iterator[Callable[[], None]]:
    """Within, the signals are only noted; the `deliver` yielded hands on the first noted
    one, and one still noted at the end is handed on then (main thread only: elsewhere
    nothing changes and `deliver` does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    noted: list[tuple[int, FrameType | None]] = []
    previous: dict[int, Any] = {signum: signal.getsignal(signum) for signum in _HELD}

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append((signum, frame))

    def deliver() -> None:
        if not noted:
            return
        signum, frame = noted.pop(0)
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)
        elif handler is not signal.SIG_IGN:
            raise KeyboardInterrupt

    for held in _HELD:
        signal.signal(held, note)
    try:
        yield deliver
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    deliver()
