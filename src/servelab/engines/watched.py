"""Launching an engine with its log read live against the known signatures.

What the engine says while it starts and serves (a default MoE kernel config, CUDA graph
capture, its KV capacity, out of memory) becomes typed events; when it dies while
starting, the launch error carries the ones that explain why. The periodic stats lines
of vLLM and SGLang (running and waiting requests, KV usage) become engine samples on the
bench clock (`telemetry.logstats`), for when /metrics is absent or sparse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.core.clock import now_ns
from servelab.core.errors import EngineLaunchError
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import LAUNCH_NOTE_LINES, RunningEngine, launch_engine
from servelab.engines.signatures import (
    KIND_INFO,
    SIGNATURES,
    EventSeverity,
    LogEvent,
    LogScan,
    SignatureMatcher,
)
from servelab.telemetry.logstats import LOG_STATS_ENGINES, LogStats

__all__ = ["WatchedEngine", "describe_event", "launch_watched"]


@dataclass(frozen=True, slots=True)
class WatchedEngine:
    """A running engine, the matcher reading its log and its log's stats lines."""

    engine: RunningEngine
    matcher: SignatureMatcher | None
    log_stats: LogStats | None = None

    def stop(self) -> None:
        """Stop the engine; its log from here on is its shutdown, not the run's events."""
        if self.matcher is not None:
            self.matcher.stopping()
        self.engine.stop()

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
    matcher = (
        SignatureMatcher(spec.engine, lines_before=LAUNCH_NOTE_LINES)
        if spec.engine in SIGNATURES
        else None
    )
    log_stats = LogStats(spec.engine) if spec.engine in LOG_STATS_ENGINES else None
    try:
        engine = launch_engine(
            spec,
            log_path=log_path,
            on_status=on_status,
            on_line=_feeder(matcher, log_stats),
        )
    except EngineLaunchError as exc:
        if matcher is not None:
            exc.findings = [
                describe_event(event)
                for event in matcher.events
                if event.severity is not EventSeverity.INFO
            ]
        raise
    return WatchedEngine(engine, matcher, log_stats)


def describe_event(event: LogEvent) -> str:
    """One line: the kind, the engine's words, and what to try."""
    repeated = f" (x{event.count})" if event.count > 1 else ""
    return f"{event.kind.value}{repeated}: {event.text} — {KIND_INFO[event.kind].advice}"


def _feeder(
    matcher: SignatureMatcher | None, log_stats: LogStats | None
) -> Callable[[str], None] | None:
    if matcher is None and log_stats is None:
        return None

    def feed(line: str) -> None:
        t_ns = now_ns()  # the bench clock: events and stats lines land among the requests
        if matcher is not None:
            matcher.feed(line, t_mono_ns=t_ns)
        if log_stats is not None:
            log_stats.feed(line, t_ns=t_ns)

    return feed
