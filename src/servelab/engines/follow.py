"""Following the log of an engine servelab did not launch, while a load runs.

`servelab bench --url URL --engine-log PATH` (and `servelab run`) read the lines the engine
writes to PATH during the run, from the file's end when the option was read: each goes to
the engine's SignatureMatcher and LogStats, as a launched engine's lines do
(`engines.watched`), so engine_events.json, the stats samples and the timeline come out the
same. The engine is the one given, else the first line that only one engine recognises
decides (`engines.logscan.engines_recognising`); until then every engine's readers read
every line, so nothing read before the decision is lost. A log none of whose lines decided
is settled at the end by what the endpoint said about itself (`AttachedLog.settle`).

A daemon thread polls the file every 100 ms. A rotated file (its inode changed: logrotate's
rename and create) is read to its end, then the new one from its start; a truncated one (its
size fell below what was read: logrotate's copytruncate) is read again from its start. A
truncation that the engine refills past the read position within one poll goes unseen, as
it does for `tail -F`. Line numbers are the file's when following began, and go on counting
across a rotation.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from servelab.core.clock import now_ns
from servelab.core.errors import ConfigError
from servelab.engines.logscan import SCAN_ENGINES, check_scan_engine, engines_recognising
from servelab.engines.signatures import LogScan, SignatureMatcher
from servelab.telemetry.logstats import LogStats
from servelab.telemetry.scrape import EngineTrace

__all__ = ["DEFAULT_POLL_S", "MAX_LINE_BYTES", "AttachedLog", "LogFollower", "check_followable"]

DEFAULT_POLL_S = 0.1
"""How often the file is looked at: a stats line is read at most this late, for one stat()
and one read() per poll."""
MAX_LINE_BYTES = 1 << 20
"""Longer text without a line end is handed on as one line, so memory stays bounded."""
_CHUNK_BYTES = 1 << 20


def check_followable(path: Path) -> None:
    """A ConfigError unless `path` is a plain file that can grow (not .gz) and be read."""
    if path.suffix == ".gz":
        raise ConfigError(
            f"--engine-log {path} is compressed: a .gz log cannot grow while the load runs",
            hint=f"read a finished log with `servelab engine scan {path}`",
        )
    if not path.exists():
        raise ConfigError(
            f"--engine-log {path}: no such file", hint="the log the engine is writing now"
        )
    if not path.is_file():
        raise ConfigError(f"--engine-log {path} is not a file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"--engine-log {path}: no permission to read it")


class LogFollower:
    """Hands every line appended to a file to `on_line`, from a daemon thread.

    The file is opened at its end when the follower is made (a ConfigError if it cannot be);
    the lines it held are counted, not read. `start` begins the polling, `stop` reads what
    was written until then and ends it.
    """

    def __init__(
        self, path: Path, on_line: Callable[[str], None], *, poll_s: float = DEFAULT_POLL_S
    ) -> None:
        self.path = path
        self._on_line = on_line
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending = b""
        self.lines = 0
        """Lines handed on."""
        self.rotations = 0
        """Times the file was replaced or truncated while followed."""
        self.problem: str | None = None
        """The latest error reading it (tried again at the next poll) or a line of it."""
        try:
            self._file: BinaryIO = path.open("rb")
        except OSError as exc:
            raise ConfigError(f"--engine-log {path}: cannot read it: {exc.strerror}") from None
        end = self._file.seek(0, os.SEEK_END)
        self.lines_before, self._mid_line = _count_lines(self._file, end)
        """Lines the file held (an unended last one counts, and the rest of it is skipped)."""

    def start(self) -> None:
        """Poll from a daemon thread until `stop`."""
        self._thread = threading.Thread(
            target=self._run, name=f"engine-log:{self.path.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Read what is there now, hand on an unended last line, end the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        else:
            self._file.close()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._poll_s):
                self._poll()
            self._poll()
            if self._pending:
                self._hand_on(self._pending)
        finally:
            self._file.close()

    def _poll(self) -> None:
        try:
            self._drain()
            now = os.stat(self.path)
            mine = os.fstat(self._file.fileno())
            if (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev):
                self._reopen()  # rotated: the old file was read to its end above
            elif now.st_size < self._file.tell():
                self._restart()  # truncated in place
        except FileNotFoundError:
            pass  # between rotation's rename and create: the next poll finds the new file
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror or exc}"

    def _reopen(self) -> None:
        replacement = self.path.open("rb")
        self._file.close()
        self._file = replacement
        self._restart()

    def _restart(self) -> None:
        """Read the file from its start; a line left unended is handed on as it was."""
        if self._pending:
            self._hand_on(self._pending)
        self._pending = b""
        self._mid_line = False
        self._file.seek(0)
        self.rotations += 1
        self._drain()

    def _drain(self) -> None:
        while chunk := self._file.read(_CHUNK_BYTES):
            *lines, self._pending = (self._pending + chunk).split(b"\n")
            if self._mid_line and lines:
                lines = lines[1:]  # the end of a line written before following began
                self._mid_line = False
            for raw in lines:
                self._hand_on(raw)
            if len(self._pending) > MAX_LINE_BYTES:
                self._hand_on(self._pending)
                self._pending = b""

    def _hand_on(self, raw: bytes) -> None:
        """One line to `on_line`; one that fails there is noted, and the next is read."""
        self.lines += 1
        try:
            self._on_line(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except Exception as exc:  # a reader's bug must not end the following
            self.problem = f"line {self.lines_before + self.lines}: {type(exc).__name__}: {exc}"


def _count_lines(file: BinaryIO, end: int) -> tuple[int, bool]:
    """The lines in the first `end` bytes, and whether the last is unended; leaves the
    file at `end`."""
    file.seek(0)
    count, left, last = 0, end, b"\n"
    while left > 0 and (chunk := file.read(min(_CHUNK_BYTES, left))):
        count += chunk.count(b"\n")
        left -= len(chunk)
        last = chunk[-1:]
    file.seek(end)
    mid_line = last != b"\n"
    return count + int(mid_line), mid_line


@dataclass(frozen=True, slots=True)
class _Readers:
    """One engine's readers of the followed lines."""

    matcher: SignatureMatcher
    stats: LogStats

    @classmethod
    def of(cls, engine: str, lines_before: int) -> _Readers:
        return cls(SignatureMatcher(engine, lines_before=lines_before), LogStats(engine))

    def feed(self, line: str, t_ns: int) -> None:
        self.matcher.feed(line, t_mono_ns=t_ns)
        self.stats.feed(line, t_ns=t_ns)


class AttachedLog:
    """The followed log of an engine servelab did not launch: its signatures and stats
    lines, read as a launched engine's are. `trace()` is what `run_bench(log_stats=...)`
    reads; `scan()` what engine_events.json holds."""

    def __init__(
        self, path: Path, *, engine: str | None = None, poll_s: float = DEFAULT_POLL_S
    ) -> None:
        """Checks `path` now (a ConfigError if it cannot be followed); `start` opens it."""
        check_scan_engine(engine)
        check_followable(path)
        self.path = path
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._engine = engine
        self.decided_by: str | None = "given" if engine else None
        """What named the engine: given, its log, or what the endpoint said of itself."""
        self._follower: LogFollower | None = None
        self._readers: dict[str, _Readers] = {}

    @property
    def engine(self) -> str | None:
        with self._lock:
            return self._engine

    @property
    def lines_before(self) -> int:
        """Lines the file held when following began."""
        return self._follower.lines_before if self._follower is not None else 0

    def start(self) -> None:
        """Open the file at its end and read the lines written from now on."""
        follower = LogFollower(self.path, self._feed, poll_s=self._poll_s)
        engines = (self._engine,) if self._engine else SCAN_ENGINES
        with self._lock:
            self._readers = {name: _Readers.of(name, follower.lines_before) for name in engines}
        self._follower = follower
        follower.start()

    def stop(self) -> None:
        """Read the lines written until now, then stop; a second call does nothing more."""
        if self._follower is not None:
            self._follower.stop()

    def settle(self, engine: str | None, why: str) -> None:
        """Name the engine where no line of its log did (`why`: what said so)."""
        with self._lock:
            if self._engine is None and engine in self._readers:
                self._decide(engine, why)

    def trace(self) -> EngineTrace:
        """The stats samples read so far; none until the engine is known."""
        with self._lock:
            readers = self._readers.get(self._engine) if self._engine else None
        if readers is None:
            return EngineTrace(reason=f"no line of {self.path} recognised yet")
        return readers.stats.trace()

    def scan(self) -> LogScan | None:
        """The events read so far; None while the engine is not known."""
        with self._lock:
            readers = self._readers.get(self._engine) if self._engine else None
        return readers.matcher.summary() if readers is not None else None

    def describe(self) -> str:
        """One line: what was read, as which engine, and what named it."""
        follower = self._follower
        lines = follower.lines if follower else 0
        read = f"engine log {self.path}: {lines} new line{'s' * (lines != 1)}"
        if follower is not None and follower.rotations:
            read += f", reopened {follower.rotations} time{'s' * (follower.rotations > 1)}"
        if follower is not None and follower.problem:
            read += f" (last read error: {follower.problem})"
        scan, samples = self.scan(), len(self.trace().samples)
        if scan is None:
            names = " or ".join(SCAN_ENGINES)
            return f"{read}, none recognised as {names}'s (name it with --engine-log-format)"
        events = sum(scan.counts.values())
        return (
            f"{read}, read as {scan.engine}'s ({self.decided_by}): {events} event line"
            f"{'s' * (events != 1)}, {samples} stats line{'s' * (samples != 1)}"
        )

    def _feed(self, line: str) -> None:
        t_ns = now_ns()  # the bench clock, as a launched engine's lines are stamped
        with self._lock:
            if self._engine is None:
                votes = engines_recognising(line)
                if len(votes) == 1:
                    self._decide(next(iter(votes)), "its log")
            for readers in self._readers.values():
                readers.feed(line, t_ns)

    def _decide(self, engine: str, why: str) -> None:
        self._engine = engine
        self.decided_by = why
        self._readers = {engine: self._readers[engine]}
