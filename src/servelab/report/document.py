"""The report as content, before it is HTML or Markdown: sections of typed blocks.

The sections are built once (report.sections) and rendered twice (report.html,
report.markdown), so the two files say the same things. Every string here is plain
text, whatever its origin (an engine's log, a model's name, a user's title): only the
renderers turn it into markup, and they escape it there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from servelab.report.plots import Plot

__all__ = [
    "Block",
    "Bullets",
    "Code",
    "Figure",
    "KeyValues",
    "Paragraph",
    "Report",
    "Section",
    "Table",
    "Tone",
]

Tone = Literal["plain", "good", "bad", "warn", "info"]


@dataclass(frozen=True)
class Paragraph:
    text: str
    tone: Tone = "plain"


@dataclass(frozen=True)
class Bullets:
    """A list; each item is (tone, text, sub-items)."""

    items: list[tuple[Tone, str, list[str]]]


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str | None = None
    tones: list[Tone] | None = None
    """One per row: how the row is marked (a met target green, a miss red)."""
    right: frozenset[int] = frozenset()
    """Columns of numbers, aligned right."""
    bad: frozenset[tuple[int, int]] = frozenset()
    """(row, column) cells that show a problem."""


@dataclass(frozen=True)
class KeyValues:
    """A two-column fact list: (name, value)."""

    rows: list[tuple[str, str]]


@dataclass(frozen=True)
class Code:
    """Text to copy as is: a launch command, a spec, log lines."""

    text: str
    language: str = ""


@dataclass(frozen=True)
class Figure:
    plot: Plot


Block = Paragraph | Bullets | Table | KeyValues | Code | Figure


@dataclass(frozen=True)
class Section:
    key: str
    """The anchor: 'targets', 'machine', ..."""
    title: str
    blocks: list[Block] = field(default_factory=list)
    subsections: list[Section] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    title: str
    subtitle: str
    sections: list[Section]
    generator: str
    headline: list[tuple[Tone, str]] = field(default_factory=list)
    """The answer first: best throughput, single stream, knee, targets, top finding."""
    """servelab's version and the time it was written, for the footer."""
