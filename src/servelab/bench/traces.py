"""Request traces for open-loop replay: when each request arrived and how long it was.

Two public formats, told apart by content (the first non-empty line):

- Mooncake JSONL (kvcache-ai/Mooncake, `FAST25-release/README.md`, "Trace Format"; the
  files `FAST25-release/traces/conversation_trace.jsonl`, `toolagent_trace.jsonl`,
  `synthetic_trace.jsonl`): one object per line, `timestamp` (ms, relative arrival),
  `input_length`, `output_length` and `hash_ids`, one remapped prefix-block hash per 512
  tokens of the prompt (the last block holds the rest). Equal ids are reusable prefix KV
  blocks.
- BurstGPT CSV (HPMLL/BurstGPT, `README.md`, "Schema"; `data/BurstGPT_1.csv`): a header
  naming `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`, `Total tokens` and
  `Log Type`; later releases add `Session ID` and `Elapsed time` after `Timestamp`, so
  columns are found by name.

Only the window's requests are kept, so a long trace costs the memory of its window. A
request with 0 input or 0 output tokens cannot be replayed (BurstGPT's failed requests
have 0 response tokens): it is skipped and counted.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, TypeAlias, TypeGuard

from servelab.core.errors import ConfigError
from servelab.core.units import NS_PER_S, parse_duration_s

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "Replay",
    "Trace",
    "TraceRequest",
    "Window",
    "load_replay",
    "parse_window",
    "read_trace",
    "shared_block_prefix",
]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per `hash_ids` block, as kvcache-ai/Mooncake's FAST25-release/README.md states."""
_MS_PER_S = 1000.0
_BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_FORMATS_HINT = "Mooncake JSONL, or a BurstGPT CSV with Timestamp, Request and Response tokens"
_WINDOW_HINT = "START:END with units, either side may be empty, e.g. 10m:20m, 0:90s or :300s"
_ZERO = re.compile(r"^\s*(0+(\.0*)?|\.0+)\s*(ms|s|m|h)?\s*$")

Window: TypeAlias = tuple[float | None, float | None]
"""[start, end) in seconds on the trace's own clock; None leaves that side open."""
TraceFormat: TypeAlias = Literal["mooncake", "burstgpt"]
_PrefixNode: TypeAlias = dict[int, "_PrefixNode"]


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request: its arrival in seconds on the trace's clock and its lengths in tokens."""

    arrival_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()
    """Mooncake's block ids; empty for BurstGPT."""


@dataclass(frozen=True, slots=True)
class Trace:
    """The requests of a trace's window, in arrival order (file order among equal times)."""

    format: TraceFormat
    path: Path
    requests: tuple[TraceRequest, ...]
    skipped: int
    """Requests of the window with 0 input or 0 output tokens, left out."""
    span_s: tuple[float, float]
    """First and last arrival of the whole file, in seconds on its clock."""


@dataclass(frozen=True, slots=True)
class Replay:
    """A trace's window as one open-loop level: each request sent at its planned time."""

    trace: Trace
    speed: float
    window: Window
    arrivals_ns: tuple[int, ...] = field(init=False)
    """Planned send times after the level's start: the first request at 0, the trace's
    gaps divided by `speed`."""

    def __post_init__(self) -> None:
        origin = self.trace.requests[0].arrival_s
        offsets = tuple(
            round((r.arrival_s - origin) / self.speed * NS_PER_S) for r in self.trace.requests
        )
        object.__setattr__(self, "arrivals_ns", offsets)

    @property
    def rate(self) -> float:
        """Mean arrivals per second of the replay, 1 / the mean gap (n/s if all come at once)."""
        n = len(self.arrivals_ns)
        span_s = self.arrivals_ns[-1] / NS_PER_S
        return (n - 1) / span_s if span_s > 0 else float(n)

    def describe(self) -> dict[str, str | int | float | None]:
        """What summary.json keeps of it (`run.workload`), times in s on the trace's clock."""
        return {
            "trace_format": self.trace.format,
            "trace_speed": self.speed,
            "trace_window_start_s": self.window[0],
            "trace_window_end_s": self.window[1],
            "trace_requests": len(self.trace.requests),
            "trace_skipped": self.trace.skipped,
            "trace_first_s": self.trace.span_s[0],
            "trace_last_s": self.trace.span_s[1],
        }


def load_replay(path: Path, *, speed: float = 1.0, window: Window = (None, None)) -> Replay:
    """The replay of `path`'s window at `speed` (2.0 sends it in half the trace's time)."""
    if not (math.isfinite(speed) and speed > 0):
        raise ConfigError(
            f"trace speed {speed:g} is not a positive number",
            hint="1 replays in real time, 2 twice as fast, 0.5 at half speed",
        )
    return Replay(read_trace(path, window=window), speed, window)


def read_trace(path: Path, *, window: Window = (None, None)) -> Trace:
    """The requests of a Mooncake or BurstGPT trace that arrive in `window`."""
    if not path.is_file():
        raise ConfigError(f"trace file {path} does not exist")
    reader = _Reader(path, window)
    try:
        with path.open(encoding="utf-8-sig", newline="") as file:
            number, first = _first_line(file)
            if first.lstrip().startswith("{"):
                reader.read_mooncake(itertools.chain([first], file), number)
            elif _is_burstgpt_header(first):
                reader.read_burstgpt(first, file, number)
            else:
                raise ConfigError(f"trace {path} is in an unknown format", hint=_FORMATS_HINT)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"trace {path} is not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    return reader.trace()


def parse_window(text: str) -> Window:
    """The CLI's `START:END`: each side a time with its unit (or 0), or empty for open."""
    start_text, colon, end_text = text.partition(":")
    if not colon:
        raise ConfigError(f"trace window {text!r} has no ':'", hint=_WINDOW_HINT)
    start, end = _window_side(start_text, text), _window_side(end_text, text)
    if start is not None and end is not None and start >= end:
        raise ConfigError(f"trace window {text!r} ends before it starts", hint=_WINDOW_HINT)
    return start, end


def shared_block_prefix(requests: Iterable[TraceRequest]) -> list[int]:
    """For each request, how many leading blocks repeat those of a request before it.

    The most any earlier request shares, as a prefix: what a prefix cache of unbounded
    size could hit, in blocks.
    """
    root: _PrefixNode = {}
    shared: list[int] = []
    for request in requests:
        node, depth, matching = root, 0, True
        for hash_id in request.hash_ids:
            matching = matching and hash_id in node
            depth += matching
            node = node.setdefault(hash_id, {})
        shared.append(depth)
    return shared


def _window_side(side: str, text: str) -> float | None:
    if not side.strip():
        return None
    if _ZERO.match(side):
        return 0.0
    return parse_duration_s(side, what=f"trace window {text!r}:")


def _first_line(file: TextIO) -> tuple[int, str]:
    """The first line that is not blank, and its number; a ConfigError if there is none."""
    for number, line in enumerate(file, start=1):
        if line.strip():
            return number, line
    raise ConfigError(f"trace {file.name} is empty", hint=_FORMATS_HINT)


def _is_burstgpt_header(line: str) -> bool:
    header = next(csv.reader([line]), [])
    return all(column in header for column in _BURSTGPT_COLUMNS)


class _Reader:
    """Keeps the window's requests of one file and what is needed to explain an empty one."""

    def __init__(self, path: Path, window: Window) -> None:
        self.path = path
        self.start_s, self.end_s = window
        self.format: TraceFormat = "mooncake"
        self.kept: list[TraceRequest] = []
        self.skipped = 0
        self.first_s = math.inf
        self.last_s = -math.inf

    def read_mooncake(self, lines: Iterable[str], first_number: int) -> None:
        for number, line in enumerate(lines, start=first_number):
            if not line.strip():
                continue
            try:
                self.add(_mooncake_request(json.loads(line)))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                raise ConfigError(f"{self.path}:{number}: {exc}", hint="a Mooncake line") from None

    def read_burstgpt(self, header: str, lines: Iterable[str], header_number: int) -> None:
        self.format = "burstgpt"
        names = next(csv.reader([header]))
        columns = [names.index(name) for name in _BURSTGPT_COLUMNS]
        rows = csv.reader(lines)
        for row in rows:
            if not row:
                continue
            try:
                self.add(_burstgpt_request(row, columns))
            except ValueError as exc:
                number = header_number + rows.line_num
                raise ConfigError(f"{self.path}:{number}: {exc}", hint="a BurstGPT row") from None

    def add(self, request: TraceRequest) -> None:
        t = request.arrival_s
        self.first_s, self.last_s = min(self.first_s, t), max(self.last_s, t)
        if (self.start_s is not None and t < self.start_s) or (
            self.end_s is not None and t >= self.end_s
        ):
            return
        if request.input_len == 0 or request.output_len == 0:
            self.skipped += 1
        else:
            self.kept.append(request)

    def trace(self) -> Trace:
        if self.first_s > self.last_s:
            raise ConfigError(f"trace {self.path} holds no request", hint=_FORMATS_HINT)
        span = (self.first_s, self.last_s)
        if not self.kept:
            raise ConfigError(self._why_empty(), hint=f"the trace spans {span[0]:g}–{span[1]:g} s")
        ordered = tuple(sorted(self.kept, key=lambda request: request.arrival_s))
        return Trace(self.format, self.path, ordered, self.skipped, span)

    def _why_empty(self) -> str:
        if self.skipped:
            return (
                f"the {self.skipped} requests of {self.path} in the window all have 0 input "
                "or 0 output tokens"
            )
        bounds = [f"{b:g}" if b is not None else "" for b in (self.start_s, self.end_s)]
        return f"no request of {self.path} arrives in the window [{bounds[0]}, {bounds[1]}) s"


def _mooncake_request(record: Any) -> TraceRequest:
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    timestamp = record.get("timestamp")
    if not (_is_number(timestamp) and math.isfinite(timestamp) and timestamp >= 0):
        raise ValueError(f"timestamp {timestamp!r} is not a non-negative number of ms")
    input_len = _count(record.get("input_length"), "input_length")
    output_len = _count(record.get("output_length"), "output_length")
    hash_ids = record.get("hash_ids")
    if not (isinstance(hash_ids, list) and all(_is_int(h) for h in hash_ids)):
        raise ValueError(f"hash_ids {hash_ids!r} is not a list of integers")
    blocks = math.ceil(input_len / MOONCAKE_BLOCK_TOKENS)
    if len(hash_ids) != blocks:
        raise ValueError(
            f"{len(hash_ids)} hash_ids for {input_len} input tokens "
            f"(one per {MOONCAKE_BLOCK_TOKENS}-token block: {blocks})"
        )
    return TraceRequest(timestamp / _MS_PER_S, input_len, output_len, tuple(hash_ids))


def _burstgpt_request(row: list[str], columns: list[int]) -> TraceRequest:
    if len(row) <= max(columns):
        raise ValueError(f"{len(row)} columns, fewer than the header's")
    timestamp, request_tokens, response_tokens = (row[c].strip() for c in columns)
    try:
        arrival_s = float(timestamp)
    except ValueError:
        raise ValueError(f"Timestamp {timestamp!r} is not a number of seconds") from None
    if not (math.isfinite(arrival_s) and arrival_s >= 0):
        raise ValueError(f"Timestamp {timestamp!r} is not a non-negative number of seconds")
    input_len = _count(_whole(request_tokens, "Request tokens"), "Request tokens")
    output_len = _count(_whole(response_tokens, "Response tokens"), "Response tokens")
    return TraceRequest(arrival_s, input_len, output_len)


def _whole(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} {text!r} is not a whole number") from None


def _count(value: object, name: str) -> int:
    if not (_is_int(value) and value >= 0):
        raise ValueError(f"{name} {value!r} is not a non-negative integer")
    return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
