"""The load axis shared by the sweep plots: concurrency in closed loop, rate in open loop.

A sweep is one mode, but a compare report may put a closed-loop run beside an open-loop
one; then concurrency is plotted and open-loop levels are left out (with a note), since a
request rate and a concurrency share no axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from servelab.bench.results import LevelSummary

__all__ = ["LOG_SPREAD", "LoadAxis", "band_label", "load_axis", "scale_for", "short_label"]

LOG_SPREAD = 30.0
"""A panel's values spanning this factor or more are drawn on a log axis."""


@dataclass(frozen=True, slots=True)
class LoadAxis:
    """Which number of a level is its x, and how it is spelt."""

    mode: Literal["concurrency", "request_rate"]

    @property
    def label(self) -> str:
        if self.mode == "concurrency":
            return "concurrency (requests in flight)"
        return "request rate (requests/s)"

    @property
    def by(self) -> str:
        """The words for a title: 'Throughput by concurrency'."""
        return "concurrency" if self.mode == "concurrency" else "request rate"

    def x(self, level: LevelSummary) -> float | None:
        """The level's position, None when it is not on this axis (the other mode)."""
        value = level.max_concurrency if self.mode == "concurrency" else level.request_rate
        return None if value is None else float(value)

    def points(self, levels: Iterable[LevelSummary]) -> list[tuple[float, LevelSummary]]:
        """The levels on this axis with their x, sorted by x (a sweep may run downwards)."""
        points = [(x, level) for level in levels if (x := self.x(level)) is not None]
        return sorted(points, key=lambda point: point[0])

    def left_out(self, levels: Iterable[LevelSummary]) -> int:
        return sum(1 for level in levels if self.x(level) is None)


def load_axis(levels: Iterable[LevelSummary]) -> LoadAxis:
    """Concurrency when any level is closed-loop, else the request rate."""
    modes = {level.load_mode for level in levels}
    return LoadAxis("concurrency" if "concurrency" in modes or not modes else "request_rate")


def short_label(level: LevelSummary) -> str:
    """A level's load in a tick or beside a point: '32' (concurrency) or '4/s' (rate)."""
    if level.max_concurrency is not None:
        return str(level.max_concurrency)
    if level.request_rate is not None:
        return f"{level.request_rate:g}/s"
    return f"level {level.level}"


def band_label(level: LevelSummary) -> str:
    """A level's band in a timeline: 'c=32' or '4 req/s'."""
    if level.max_concurrency is not None:
        return f"c={level.max_concurrency}"
    if level.request_rate is not None:
        return f"{level.request_rate:g} req/s"
    return f"level {level.level}"


def scale_for(values: Sequence[float]) -> Literal["linear", "log"]:
    """Log when positive values span LOG_SPREAD or more, so the small ones stay readable."""
    positive = [value for value in values if value > 0]
    if not positive or len(positive) < len(values):
        return "linear"
    return "log" if max(positive) / min(positive) >= LOG_SPREAD else "linear"
