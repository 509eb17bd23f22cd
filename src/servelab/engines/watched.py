"""Launching an engine with its log read live against the known signatures.

What the engine says while it starts and serves (a default MoE kernel config, CUDA graph
capture, its KV capacity, out of memory) becomes typed events; when it dies while
starting, the launch error carries the ones that explain why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.core.errors import EngineLaunchError
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, launch_engine
from servelab.engines.signatures import (
    KIND_INFO,
    SIGNATURES,
    EventSeverity,
    LogEvent,
    LogScan,
    SignatureMatcher,
)

__all__ = ["WatchedEngine", "describe_event", "launch_watched"]


@dataclass(frozen=True, slots=True)
class WatchedEngine:
    """A running engine and the matcher reading its log."""

    engine: RunningEngine
    matcher: SignatureMatcher | None

    def scan(self) -> LogScan | None:
        """What its log said so far; None for an engine without signatures."""
        return self.matcher.summary() if self.matcher is not None else None


def launch_watched(
    spec: EngineSpec,
    *,
    log_path: Path,
    on_status: Callable[[str], None] = lambda _msg: None,
) -> WatchedEngine:
    """`launch_engine` with a SignatureMatcher on every log line; a launch error gets the
    warnings and errors it matched, each with what to try."""
    matcher = SignatureMatcher(spec.engine) if spec.engine in SIGNATURES else None
    try:
        engine = launch_engine(
            spec,
            log_path=log_path,
            on_status=on_status,
            on_line=None if matcher is None else _feeder(matcher),
        )
    except EngineLaunchError as exc:
        if matcher is not None:
            exc.findings = [
                describe_event(event)
                for event in matcher.events
                if event.severity is not EventSeverity.INFO
            ]
        raise
    return WatchedEngine(engine, matcher)


def describe_event(event: LogEvent) -> str:
    """One line: the kind, the engine's words, and what to try."""
    repeated = f" (x{event.count})" if event.count > 1 else ""
    return f"{event.kind.value}{repeated}: {event.text} — {KIND_INFO[event.kind].advice}"


def _feeder(matcher: SignatureMatcher) -> Callable[[str], None]:
    def feed(line: str) -> None:
        matcher.feed(line)

    return feed
