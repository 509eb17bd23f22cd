"""engine.log: the engine's stdout and stderr, each line stamped as it arrives.

A reader thread takes the child's output from a pipe and writes every line as

    2026-11-29T15:43:01.123456Z 8123.456789 <the line>

UTC wall time, then `time.perf_counter()` in seconds (CLOCK_MONOTONIC, the clock the
load generator stamps requests on, so log events line up with requests), then the line.
A carriage return ends a line too, so progress bars become lines. Each line also goes to
an optional `on_line` hook (the log-signature matcher); a hook that raises is dropped
with a note in the log, never the reader, which must keep draining the pipe or the
engine would block on a full pipe. Lines servelab adds itself start with `servelab:`.
Every line is scrubbed of the secrets servelab was handed before it is written
(an engine may echo its `--api-key` or environment).
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from servelab.core.redact import scrub

__all__ = ["LINE_PREFIX", "LogPump", "log_tail", "parse_log_line", "stamp"]

LINE_PREFIX = "servelab: "
"""Starts the lines servelab writes into engine.log itself."""

_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) (\d+\.\d{6}) ?(.*)$")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def stamp(line: str) -> str:
    """`line` with the UTC and monotonic stamps in front, and a newline after."""
    utc = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{utc} {time.perf_counter():.6f} {line}\n"


def parse_log_line(text: str) -> tuple[str | None, float | None, str]:
    """(UTC ISO time, perf_counter seconds, line) of a stamped line; stamps None if absent."""
    match = _STAMPED.match(text.rstrip("\n"))
    if match is None:
        return None, None, text.rstrip("\n")
    return match.group(1), float(match.group(2)), match.group(3)


def log_tail(path: Path, lines: int) -> list[str]:
    """The last non-empty `lines` of the log, without their stamps."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    kept = [parse_log_line(raw)[2] for raw in text.splitlines()]
    return [line for line in kept if line.strip()][-lines:]


class LogPump(threading.Thread):
    """Copies a child's output into the log, stamped, and hands each line to `on_line`."""

    def __init__(
        self, stream: IO[bytes], path: Path, on_line: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(name=f"engine-log:{path.name}", daemon=True)
        self._stream = stream
        self._path = path
        self._on_line = on_line
        self._lock = threading.Lock()
        self._log = path.open("a", encoding="utf-8")

    def note(self, message: str) -> None:
        """Write a line of servelab's own (not passed to the hook)."""
        self._write(LINE_PREFIX + message)

    def run(self) -> None:
        try:
            for raw in iter(self._stream.readline, b""):
                for line in _LINE_BREAK.split(raw.decode("utf-8", errors="replace")):
                    if line:
                        self._write(line)
                        self._hand_on(line)
        finally:
            self._stream.close()

    def close(self, *, timeout_s: float = 2.0) -> None:
        """Wait for the output to end (every writer gone), then close the log."""
        self.join(timeout=timeout_s)
        with self._lock:
            self._log.close()

    def _write(self, line: str) -> None:
        with self._lock:
            if not self._log.closed:
                self._log.write(stamp(scrub(line)))
                self._log.flush()

    def _hand_on(self, line: str) -> None:
        if self._on_line is None:
            return
        try:
            self._on_line(line)
        except Exception as exc:
            self._on_line = None
            self.note(f"on_line hook failed and was dropped: {type(exc).__name__}: {exc}")
