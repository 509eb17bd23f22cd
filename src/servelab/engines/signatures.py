"""Typed events from an engine's log, matched live line by line or on a finished log.

The facts that decide a deployment's speed are often only in the engine's log (a MoE
kernel on default tiles, DeepGEMM's scale format, CUDA graphs not captured, the KV cache
and running-request limits). `SignatureMatcher.feed` turns each line into `LogEvent`s
using the signatures in `servelab.engines.signature_data`; it is called for every line
while the engine runs, so a line pays a few substring tests unless one of a signature's
literals occurs in it. A message repeated (by every tensor-parallel rank, or at every
step) is one event with a count; a kind stores at most `MAX_EVENTS_PER_KIND` distinct
events and only counts the rest.

Lines are matched wherever the message stands in them, after the engine's own prefix
("[2025-01-02 10:00:00 DP0 TP0] ", "(EngineCore_DP0 pid=123) INFO 01-02 10:00:00
[core.py:93] ", "host:pid:tid [0] NCCL INFO "). Leading stamps are dropped from the text:
servelab's launcher's (UTC, then perf_counter seconds) and docker's RFC 3339 one
(`docker logs -t`, nanoseconds), in either order, and the first of them with a zone gives
`t_unix`; the engines' own clocks name no zone (vLLM's not even the year), so they give
none. Terminal colours (vLLM's cyan worker prefixes) are dropped too.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.engines.signature_data import (
    KIND_INFO,
    SIGNATURES,
    EventKind,
    EventSeverity,
    FieldValue,
    KindInfo,
    Signature,
    Source,
)

__all__ = [
    "KIND_INFO",
    "MAX_EVENTS_PER_KIND",
    "MAX_TEXT_CHARS",
    "SIGNATURES",
    "EngineExit",
    "EventKind",
    "EventSeverity",
    "KindInfo",
    "LogEvent",
    "LogScan",
    "Signature",
    "SignatureMatcher",
    "Source",
    "scan_log",
    "scan_text",
]

MAX_EVENTS_PER_KIND = 100
MAX_TEXT_CHARS = 1000
"""Longer lines (SGLang's server_args dump, progress bars) are kept around the match."""

# A traceback frame; the line after it is source code that may quote a message verbatim
# (`raise RuntimeError(f"NCCL error: {error_str}")`), so it is not matched.
_FRAME = re.compile(r'File "[^"]+", line \d+')

# A leading ISO 8601 timestamp, as servelab's launcher (or docker, or a logger) writes it;
# after a zoned one, the launcher's perf_counter seconds.
_LEADING_STAMP = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)(Z|[+-]\d{2}:?\d{2})?"
    r"(?(2)(?:\s+\d+\.\d{6}(?=\s))?)\s+"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class LogEvent(BaseModel):
    """One engine message: what it means, where it was, and the values in it."""

    model_config = ConfigDict(extra="forbid")

    kind: EventKind
    severity: EventSeverity
    engine: str
    signature: str = Field(description="Name of the signature that matched.")
    line_no: int = Field(ge=1, description="Line of the first occurrence, from 1.")
    text: str = Field(
        description="The line without the launcher's timestamp or earlier progress-bar redraws; "
        "cut around the match when longer than MAX_TEXT_CHARS."
    )
    fields: dict[str, FieldValue] = Field(default_factory=dict)
    count: int = Field(default=1, ge=1, description="Occurrences of this same message.")
    last_line_no: int = Field(ge=1, description="Line of the latest occurrence.")
    t_unix: float | None = Field(default=None, description="From the line's leading timestamp.")
    t_mono_ns: int | None = Field(default=None, description="perf_counter_ns when it was read.")


class EngineExit(BaseModel):
    """The engine exited while servelab still needed it: how, and its last words."""

    model_config = ConfigDict(extra="forbid")

    code: int = Field(description="Its exit code; negative: killed by that signal.")
    description: str = Field(description="'exit code 1' or 'signal SIGKILL'.")
    during: str = Field(description="What servelab was doing, e.g. 'level 2'.")
    log_tail: list[str] = Field(default_factory=list, description="Its log's last lines.")


class LogScan(BaseModel):
    """Everything matched in one engine's log, for storing with the run."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    lines: int
    events: list[LogEvent]
    counts: dict[EventKind, int] = Field(description="Every occurrence, by kind.")
    exit: EngineExit | None = Field(
        default=None, description="Set when the engine died during the run."
    )
    after_stop: int = Field(
        default=0,
        description="Messages matched after servelab asked the engine to stop: its shutdown, "
        "not events of the run.",
    )


class SignatureMatcher:
    """Matches one engine's log lines against its signatures, as they arrive."""

    def __init__(self, engine: str, *, lines_before: int = 0) -> None:
        """`lines_before`: lines of the log file written before the first one fed here (the
        launcher's own note), so an event's line number is the file's."""
        signatures = SIGNATURES.get(engine)
        if signatures is None:
            known = ", ".join(sorted(SIGNATURES))
            raise ConfigError(f"no log signatures for engine {engine!r}", hint=f"known: {known}")
        self.engine = engine
        # Fallback signatures go last: they only match when their kind has not.
        self._signatures = sorted(signatures, key=lambda sig: sig.fallback)
        by_literal: dict[str, list[int]] = {}
        for index, sig in enumerate(self._signatures):
            for literal in sig.literals:
                by_literal.setdefault(literal, []).append(index)
        self._literals = tuple((literal, tuple(ids)) for literal, ids in by_literal.items())
        self._lines = lines_before
        self._after_frame = False
        self._events: list[LogEvent] = []
        self._by_key: dict[tuple[str, str], LogEvent] = {}
        self._stored: Counter[EventKind] = Counter()
        self._counts: Counter[EventKind] = Counter()
        self._stopping = False
        self._after_stop = 0

    def stopping(self) -> None:
        """servelab asked the engine to stop: what its log says from here on is its
        shutdown (vLLM's API server reports its engine core dead as it goes), counted in
        `after_stop` and not taken as events of the run."""
        self._stopping = True

    @property
    def events(self) -> list[LogEvent]:
        """The distinct events so far, in order of first occurrence, each with its count."""
        return list(self._events)

    @property
    def counts(self) -> dict[EventKind, int]:
        """Occurrences so far by kind, including repeats and events past the per-kind cap."""
        return dict(self._counts)

    @property
    def lines(self) -> int:
        """How many lines were fed."""
        return self._lines

    def feed(self, line: str, *, t_mono_ns: int | None = None) -> list[LogEvent]:
        """Match one line; return the events it shows for the first time.

        A repeat of an earlier message only raises that event's count. The source line a
        traceback prints under each frame is skipped.
        """
        self._lines += 1
        text = line.rstrip("\r\n")
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        text, t_unix = _strip_stamps(text)
        after_frame = self._after_frame
        self._after_frame = 'File "' in text and _FRAME.search(text) is not None
        if after_frame:
            return []
        candidates = {i for literal, ids in self._literals if literal in text for i in ids}
        new: list[LogEvent] = []
        matched: set[EventKind] = set()
        for index in sorted(candidates):
            sig = self._signatures[index]
            if sig.fallback and sig.kind in matched:
                continue
            match = sig.regex.search(text)
            if match is None:
                continue
            matched.add(sig.kind)
            if self._stopping:
                self._after_stop += 1
                continue
            event = self._record(sig, match, t_unix, t_mono_ns)
            if event is not None:
                new.append(event)
        return new

    def summary(self) -> LogScan:
        """A snapshot of the events and counts so far, as one model to store."""
        events = [event.model_copy() for event in self._events]
        return LogScan(
            engine=self.engine,
            lines=self._lines,
            events=events,
            counts=self.counts,
            after_stop=self._after_stop,
        )

    def _record(
        self,
        sig: Signature,
        match: re.Match[str],
        t_unix: float | None,
        t_mono_ns: int | None,
    ) -> LogEvent | None:
        self._counts[sig.kind] += 1
        fields = sig.fields(match) if sig.identity else None
        if fields is None:
            key = (sig.name, match.group(0))
        else:
            key = (sig.name, repr([fields.get(name) for name in sig.identity]))
        seen = self._by_key.get(key)
        if seen is not None:
            seen.count += 1
            seen.last_line_no = self._lines
            return None
        if self._stored[sig.kind] >= MAX_EVENTS_PER_KIND:
            return None
        self._stored[sig.kind] += 1
        event = LogEvent(
            kind=sig.kind,
            severity=sig.severity,
            engine=self.engine,
            signature=sig.name,
            line_no=self._lines,
            last_line_no=self._lines,
            text=_excerpt(match),
            fields=sig.fields(match) if fields is None else fields,
            t_unix=t_unix,
            t_mono_ns=t_mono_ns,
        )
        self._by_key[key] = event
        self._events.append(event)
        return event


def scan_log(path: Path | str, engine: str) -> list[LogEvent]:
    """The events in a finished engine log, each with its count."""
    matcher = SignatureMatcher(engine)
    with Path(path).open(encoding="utf-8", errors="replace", newline="\n") as log:
        for line in log:
            matcher.feed(line)
    return matcher.events


def scan_text(engine: str, text: str) -> list[LogEvent]:
    """The events in engine output that is not its log: an HTTP error body, a streamed
    error event. A 503 from transformers serve names the error that killed its worker,
    which its log may not hold (the log is elsewhere, or rotated). Line numbers count the
    text's own lines; the text is matched as sent (JSON escapes are not undone)."""
    matcher = SignatureMatcher(engine)
    for line in text.splitlines():
        matcher.feed(line)
    return matcher.events


def _strip_stamps(text: str) -> tuple[str, float | None]:
    """The line without its leading stamps, and the time of the first one with a zone."""
    t_unix = None
    while stamp := _LEADING_STAMP.match(text):
        text = text[stamp.end() :]
        if t_unix is None and stamp.group(2):
            iso = stamp.group(1).replace(",", ".") + stamp.group(2)
            t_unix = datetime.fromisoformat(iso).timestamp()
    return text, t_unix


def _excerpt(match: re.Match[str]) -> str:
    """The part of the line the match is in: of a progress bar redrawn with carriage
    returns, only the redraw holding the match; at most MAX_TEXT_CHARS, cut around it."""
    line = match.string
    start = line.rfind("\r", 0, match.start()) + 1
    end = line.find("\r", match.end())
    text = line[start : end if end >= 0 else len(line)].rstrip()
    if len(text) <= MAX_TEXT_CHARS:
        return text
    offset = match.start() - start
    head = max(0, offset - MAX_TEXT_CHARS // 5)
    tail = head + MAX_TEXT_CHARS
    return ("…" if head else "") + text[head:tail] + ("…" if tail < len(text) else "")
