"""The engine's log events placed on the run's time axis, for its timeline and its table.

The launcher stamps every log line when servelab's reader receives it, on the bench clock
(`perf_counter_ns`, `engines.watched`), and the signature scan keeps the stamp of a
message's first occurrence (`LogEvent.t_mono_ns`, in engine_events.json). Requests and
level windows are on the same clock, so an event's offset from the run's first measured
send is where it sits among the levels. An event before that send (loading, cache sizing,
graph capture, the preflight request, warm-up) is start-up: drawn at zero, labelled so, and
its true offset kept for the table. An engine exit has no stamp of its own: it is drawn at
the end of the level it ended (`EngineExit.during`), else at the run's last known time.
Events scanned from a finished log (an imported run) have no stamp and are only listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from servelab.core.severity import Severity
from servelab.core.units import NS_PER_S
from servelab.engines.signatures import EngineExit, LogEvent, LogScan

__all__ = ["MAX_MARKS", "EventMark", "event_marks", "event_notes", "event_time_text"]

MAX_MARKS = 40
"""At most this many markers per run, the worst and then the earliest first; the table of
server warnings lists every event."""


@dataclass(frozen=True, slots=True)
class EventMark:
    """One marker: where it is drawn and what it says."""

    t_s: float
    """Seconds from the run's first measured send (0 for start-up)."""
    label: str


def event_marks(
    scan: LogScan | None, origin_ns: int, windows: Mapping[int, tuple[int, int]]
) -> tuple[EventMark, ...]:
    """The markers of `scan`'s stamped events and its exit in time order, zero at `origin_ns`.

    `windows` are the levels' measured spans (`level_windows`), where an exit is placed.
    """
    if scan is None:
        return ()
    stamped = _stamped(scan)
    kept = sorted(stamped, key=lambda e: (e.severity.rank, e.t_mono_ns or 0))[:MAX_MARKS]
    marks = [_mark(event, (event.t_mono_ns or 0) - origin_ns) for event in kept]
    if scan.exit is not None:
        marks.append(_exit_mark(scan.exit, origin_ns, windows, stamped))
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


def _mark(event: LogEvent, offset_ns: int) -> EventMark:
    offset_s = offset_ns / NS_PER_S
    name = event.signature.rpartition(".")[2].replace("_", " ")
    worse = f"{event.severity.value}: " if event.severity.rank < Severity.INFO.rank else ""
    repeated = f" (x{event.count})" if event.count > 1 else ""
    startup = "start-up: " if offset_s < 0 else ""
    return EventMark(t_s=max(offset_s, 0.0), label=f"{startup}{worse}{name}{repeated}")


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
    return EventMark(
        t_s=max((end_ns - origin_ns) / NS_PER_S, 0.0), label=f"engine exit: {died.description}"
    )
