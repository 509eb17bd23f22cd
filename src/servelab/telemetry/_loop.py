"""A background loop on a fixed schedule, and the record of what went wrong in it.

Samplers run beside the load generator, so nothing they hit may reach it: every exception
in a tick is caught, counted by message and kept for the run's record.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["DUTY_WINDOW", "ErrorLog", "Periodic"]

DUTY_WINDOW = 5
"""The duty cap reads the median of the last five ticks: one slow tick (a server busy with
a burst of new requests) does not stretch the interval, a page that is slow to render does."""


class ErrorLog:
    """Distinct error messages with how often each happened; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, message: str) -> None:
        with self._lock:
            self._counts[message] = self._counts.get(message, 0) + 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def lines(self) -> list[str]:
        """One line per distinct message, with its count when it happened more than once."""
        return [
            message if count == 1 else f"{message} (x{count})"
            for message, count in self.counts().items()
        ]


class Periodic:
    """Calls `tick` every `interval_s` on its own daemon thread until `stop`.

    Ticks are due on a fixed grid from the start, so the rate does not drift; a tick that
    overruns makes the loop skip the slots it missed rather than run them back to back.
    """

    def __init__(
        self,
        name: str,
        interval_s: float,
        tick: Callable[[], None],
        errors: ErrorLog,
        *,
        label: str,
        max_duty: float | None = None,
        max_interval_s: float | None = None,
    ) -> None:
        """`max_duty`: the share of time ticks may take; ticks that are typically slower
        stretch the interval (an engine whose /metrics page is costly to render is scraped
        less often), up to `max_interval_s`."""
        self._interval_s = interval_s
        self._max_duty = max_duty
        self._max_interval_s = max_interval_s if max_interval_s is not None else float("inf")
        # Ticks not yet taken count as free: the first slow one alone stretches nothing.
        self._took: deque[float] = deque([0.0] * DUTY_WINDOW, maxlen=DUTY_WINDOW)
        self._tick = tick
        self._errors = errors
        self._label = label
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def signal_stop(self) -> None:
        """Ask the loop to end after the tick in progress (join with `join`)."""
        self._stop.set()

    def join(self, timeout_s: float) -> bool:
        """Wait for the thread to end; False if it is still running after `timeout_s`."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stretched(self, typical_tick_s: float) -> float:
        """The interval for ticks that typically take `typical_tick_s`: a slow endpoint is
        asked less often, but never less often than every `max_interval_s`."""
        if self._max_duty is None:
            return self._interval_s
        wanted = max(self._interval_s, typical_tick_s / self._max_duty)
        return min(wanted, max(self._max_interval_s, self._interval_s))

    def _run(self) -> None:
        interval = self._interval_s
        due = time.perf_counter()
        while not self._stop.is_set():
            began = time.perf_counter()
            try:
                self._tick()
            except Exception as exc:  # a sampler must never take the benchmark down
                self._errors.add(f"{self._label}: {type(exc).__name__}: {exc}")
            if self._max_duty is not None:
                self._took.append(time.perf_counter() - began)
                interval = self.stretched(statistics.median(self._took))
            due += interval
            now = time.perf_counter()
            if due < now:  # overran: skip to the next slot on the grid
                due += interval * ((now - due) // interval + 1)
            self._stop.wait(due - now)
