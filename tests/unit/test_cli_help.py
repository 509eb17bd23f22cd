"""Every command's --help reads cleanly at any width: paragraphs wrapped at the terminal's
width, no word cut, no help squeezed into a narrow column.

Docstrings are hard-wrapped at the source's line length; if their line breaks reached the
terminal, Rich would wrap each source line again and leave a short line in the middle of
a paragraph ("... (a generated model on the CPU,⏎served by⏎transformers serve)"). The
check: every line of a paragraph but its last is filled to most of the width it has.

Typer's options table gave the help about 18 columns at 80 and cut longer words with "…"
(`--max-concurrenc…`). The checks: no word of the output ends in an ellipsis the help
texts do not have, and no line of a panel's help breaks before a word that fits on it.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from servelab.cli import app
from servelab.cli.help_text import unwrap_help

WIDTHS = (60, 80, 120, 200)
FILLED = 0.6
"""A line that ends a paragraph early is shorter than this share of its width; a line
broken before a long word is not (no word in the help is 40% of 60 columns)."""
_BORDER = "│"
_PANEL_TOP = "╭"
_PANEL_BOTTOM = "╰"
_GAP = "  "
"""What separates a panel's columns (names, type, help) on a line."""


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, subcommand in getattr(command, "commands", {}).items():
        yield from _command_paths(subcommand, (*path, name))


def _help_texts(command: Any) -> Iterator[str]:
    yield from (getattr(command, name, None) or "" for name in ("help", "short_help", "epilog"))
    yield from (getattr(param, "help", None) or "" for param in command.params)
    for subcommand in getattr(command, "commands", {}).values():
        yield from _help_texts(subcommand)


COMMANDS = list(_command_paths(typer.main.get_command(app)))
WRITTEN_ELLIPSES = {
    word
    for text in _help_texts(typer.main.get_command(app))
    for word in text.split()
    if "…" in word
}
"""Words that end in "…" as written (`postgresql://…`), not because they were cut."""


@functools.cache
def _help(path: tuple[str, ...], width: int) -> tuple[str, ...]:
    """The help's lines, read once for every test of this width."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return tuple(line.rstrip() for line in result.output.splitlines())


def _description(lines: tuple[str, ...]) -> list[list[str]]:
    """The paragraphs above the first panel, the usage line left out."""
    text = lines[: next(i for i, line in enumerate(lines) if line.startswith(_PANEL_TOP))]
    paragraphs: list[list[str]] = [[]]
    for line in text:
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p and not p[0].startswith("Usage:")]


def _panels(lines: tuple[str, ...]) -> Iterator[tuple[list[list[str]], int]]:
    """Each panel (options, arguments, commands): every entry's help as its lines, and the
    width the help has."""
    top = 0
    for i, line in enumerate(lines):
        if line.startswith(_PANEL_TOP):
            top = i
        elif line.startswith(_PANEL_BOTTOM):
            rows = [row[2:-2].rstrip() for row in lines[top + 1 : i]]
            column = _help_column(rows)
            yield _entries(rows, column), len(line) - 4 - column


def _help_column(rows: list[str]) -> int:
    """Where the help starts: the column at which text most often follows a gap (a tie
    goes to the rightmost, the help being the last column)."""
    starts = Counter(
        i
        for row in rows
        for i in range(len(_GAP), len(row))
        if row[i - len(_GAP) : i] == _GAP and row[i] != " "
    )
    return max(starts, key=lambda i: (starts[i], i), default=0)


def _entries(rows: list[str], column: int) -> list[list[str]]:
    """The help of each entry, as its lines; an entry begins with names before the column."""
    helps: list[list[str]] = []
    for row in rows:
        names, text = row[:column], row[column:].strip()
        if names.strip():
            beside = names.endswith(_GAP) and text
            helps.append([text] if beside else [])  # else: names alone, their help below
        elif helps and text:
            helps[-1].append(text)
    return helps


def _short_lines(paragraphs: list[list[str]], width: int) -> list[str]:
    """Lines of a paragraph, its last excepted, that leave most of their width empty."""
    return [line for p in paragraphs for line in p[:-1] if len(line) < FILLED * width]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "servelab")
def test_every_paragraph_of_the_help_is_wrapped_at_the_terminals_width(
    path: tuple[str, ...], width: int
):
    assert _short_lines(_description(_help(path, width)), width - 2) == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "servelab")
def test_no_word_of_the_help_is_cut(path: tuple[str, ...], width: int):
    words = (word for line in _help(path, width) for word in line.strip(_BORDER).split())
    assert [word for word in words if "…" in word and word not in WRITTEN_ELLIPSES] == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "servelab")
def test_the_help_in_a_panel_breaks_a_line_only_before_a_word_that_does_not_fit(
    path: tuple[str, ...], width: int
):
    ragged = [
        f"{line} ⏎ {next_line}"
        for helps, help_width in _panels(_help(path, width))
        for help_lines in helps
        for line, next_line in itertools.pairwise(help_lines)
        if len(line) + 1 + len(next_line.split()[0]) <= help_width
    ]
    assert ragged == []


def test_the_help_of_every_command_is_read():
    assert {" ".join(path) for path in COMMANDS} >= {
        *("", "bench", "run", "probe", "model", "sim", "diagnose", "report", "import"),
        *("trace", "engine", "engine up", "engine check", "tune", "tune run", "tune kernels"),
    }


def test_line_breaks_within_a_paragraph_become_spaces_and_blank_lines_stay():
    text = """First line
        of a paragraph.

        Second paragraph,
        two lines."""
    assert unwrap_help(text) == "First line of a paragraph.\n\nSecond paragraph, two lines."


def test_list_items_and_indented_blocks_keep_their_lines():
    text = (
        "Steps:\n"
        "- probe the machine,\n"
        "  then launch\n"
        "- sweep\n"
        "\n"
        "For example:\n"
        "    servelab run\n"
        "    servelab report out/\n"
        "\n"
        "\b\n"
        "kept as\n"
        "written"
    )
    assert unwrap_help(text) == (
        "Steps:\n"
        "- probe the machine, then launch\n"
        "- sweep\n"
        "\n"
        "For example:\n"
        "    servelab run\n"
        "    servelab report out/\n"
        "\n"
        "\b\n"
        "kept as\n"
        "written"
    )
