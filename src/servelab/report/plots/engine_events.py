"""The engine's log events placed on the run's time axis, for its timeline and its table.

The launcher stamps every log line when servelab's reader receives it, on the bench clock
(`perf_counter_ns`, `engines.watched`), and the signature scan keeps the stamp of a
message's first occurrence (`LogEvent.t_mono_ns`, in engine_events.json). Requests and
level windows are on the same clock, so an event's offset from the run's first measured
send is where it sits among the levels. An event before that send (loading, cache sizing,
graph capture, the preflight request, warm-up) is start-up: drawn at zero (the caption says
so) and its true offset kept for the table. An engine exit has no stamp of its own: it is
drawn at the end of the level it ended (`EngineExit.during`), else at the run's last known
time. Events scanned from a finished log (an imported run) have no stamp and are only listed.

Each event kind is a row of the timeline, named as the server warnings name it ("KV cache
full" for kv_cache_full), so a marker's row says what it is and no label has to find room
beside it; only a repeat count or how the engine exited is written next to a marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from servelab.core.units import NS_PER_S
from servelab.engines.signatures import EngineExit, LogEvent, LogScan

__all__ = [
    "EXIT_ROW",
    "MAX_MARKS",
    "EventMark",
    "event_marks",
    "event_notes",
    "event_rows",
    "event_time_text",
]

MAX_MARKS = 40
"""At most this many markers per run, the worst and then the earliest first; the table of
server warnings lists every event."""
EXIT_ROW = "engine exit"
"""The row of an engine's exit, below every event kind's."""
_ACRONYMS = {
    "kv": "KV",
    "cuda": "CUDA",
    "moe": "MoE",
    "nccl": "NCCL",
    "nan": "NaN",
    "deepgemm": "DeepGEMM",
}


@dataclass(frozen=True, slots=True)
class EventMark:
    """One marker: where it is drawn and what it says."""

    t_s: float
    """Seconds from the run's first measured send (0 for start-up)."""
    row: str
    """The event's kind as its row is labelled ("KV cache full"), or `EXIT_ROW`."""
    note: str = ""
    """Written beside the marker: how often the message repeated, how the engine exited."""


def event_rows(scans: Iterable[LogScan | None]) -> tuple[str, ...]:
    """The timeline's rows, top to bottom: each kind drawn, in the order its first event was
    read (run after run), then `EXIT_ROW` if an engine exited."""
    rows: dict[str, None] = {}
    exited = False
    for scan in scans:
        if scan is None:
            continue
        for event in sorted(_drawn(scan), key=lambda e: e.t_mono_ns or 0):
            rows.setdefault(_row(event))
        exited = exited or scan.exit is not None
    return (*rows, *((EXIT_ROW,) if exited else ()))


def event_marks(
    scan: LogScan | None, origin_ns: int, windows: Mapping[int, tuple[int, int]]
) -> tuple[EventMark, ...]:
    """The markers of `scan`'s stamped events and its exit in time order, zero at `origin_ns`.

    `windows` are the levels' measured spans (`level_windows`), where an exit is placed.
    """
    if scan is None:
        return ()
    marks = [_mark(event, (event.t_mono_ns or 0) - origin_ns) for event in _drawn(scan)]
    if scan.exit is not None:
        marks.append(_exit_mark(scan.exit, origin_ns, windows, _stamped(scan)))
    return tuple(sorted(marks, key=lambda m: m.t_s))


def event_notes(scan: LogScan | None) -> list[str]:
    """What of `scan` the timeline cannot draw, one line each."""
    if scan is None:
        return []
    stamped = len(_stamped(scan))
    notes = []
    if stamped < len(scan.events):
        notes.append(
            f"{len(scan.events) - stamped} log event(s) have no bench-clock time (scanned "
            "from a finished log) and are not drawn; the server warnings list them"
        )
    if stamped > MAX_MARKS:
        notes.append(
            f"{stamped - MAX_MARKS} more log event(s) than the {MAX_MARKS} drawn; "
            "the server warnings list them"
        )
    return notes


def event_time_text(event: LogEvent, origin_ns: int | None) -> str | None:
    """When the event was read, in the timeline's seconds; None without a stamp or origin."""
    if event.t_mono_ns is None or origin_ns is None:
        return None
    offset_s = (event.t_mono_ns - origin_ns) / NS_PER_S
    if offset_s < 0:
        return f"start-up ({-offset_s:,.1f} s before the first measured request)"
    return f"{offset_s:,.1f} s"


def _stamped(scan: LogScan) -> list[LogEvent]:
    return [event for event in scan.events if event.t_mono_ns is not None]


def _drawn(scan: LogScan) -> list[LogEvent]:
    """The stamped events that get a marker: the worst, then the earliest, `MAX_MARKS` in all."""
    return sorted(_stamped(scan), key=lambda e: (e.severity.rank, e.t_mono_ns or 0))[:MAX_MARKS]


def _row(event: LogEvent) -> str:
    """The kind in words, acronyms spelled as engines spell them ("KV cache full")."""
    return " ".join(_ACRONYMS.get(word, word) for word in event.kind.value.split("_"))


def _mark(event: LogEvent, offset_ns: int) -> EventMark:
    repeated = f"x{event.count}" if event.count > 1 else ""
    return EventMark(t_s=max(offset_ns / NS_PER_S, 0.0), row=_row(event), note=repeated)


def _exit_mark(
    died: EngineExit,
    origin_ns: int,
    windows: Mapping[int, tuple[int, int]],
    stamped: list[LogEvent],
) -> EventMark:
    """At the end of the level it ended, else after everything the run stamped."""
    level = died.during.removeprefix("level ")
    if level.isdigit() and int(level) in windows:
        end_ns = windows[int(level)][1]
    else:
        ends = [end for _, end in windows.values()]
        ends += [e.t_mono_ns for e in stamped if e.t_mono_ns is not None]
        end_ns = max(ends, default=origin_ns)
    t_s = max((end_ns - origin_ns) / NS_PER_S, 0.0)
    return EventMark(t_s=t_s, row=EXIT_ROW, note=died.description)
