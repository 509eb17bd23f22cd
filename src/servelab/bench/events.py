"""Progress events a benchmark emits while it runs; the CLI renders them."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.bench.load import LevelSpec
from servelab.bench.results import LevelSummary

__all__ = ["BenchEvent", "LevelFinished", "LevelProgress", "LevelStarted", "Notice"]


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should know (a dropped field, a calibration)."""

    message: str


@dataclass(frozen=True, slots=True)
class LevelStarted:
    level: LevelSpec
    total_requests: int | None
    """None when the level runs for a duration."""
    duration_s: float | None
    workers: int
    warmup: bool
    """True while the warm-up requests run, False when measurement begins."""


@dataclass(frozen=True, slots=True)
class LevelProgress:
    level: LevelSpec
    completed: int
    failed: int
    output_tokens: int
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class LevelFinished:
    summary: LevelSummary


BenchEvent = Notice | LevelStarted | LevelProgress | LevelFinished
