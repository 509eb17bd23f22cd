"""Options panels whose help keeps the room to be read, at any terminal width.

Typer draws an options panel as a Rich table of six columns: long names, short names,
negative long names, negative short names, type and help. Rich sizes the columns by their
longest cells and narrows the widest first, so at 80 columns the help is left about 18 and
a longer word is cut with "…". Here each panel is laid out as Click lays out its options:
names and type on one line; the help beside them, or, where the names would take more than
half the width or squeeze the help's longest word, on the next lines at the help's column.
An option's default and env var follow its help in the same paragraph.

Typer's cells are kept (its styles, its help, default and env var strings): only where
they go changes. `readable_options()` has every options panel Typer prints, while it lasts,
pass through `_OptionsLayout`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import typer.rich_utils
from rich.columns import Columns
from rich.console import (
    Console,
    ConsoleOptions,
    ConsoleRenderable,
    Group,
    RenderableType,
    RenderHook,
    RenderResult,
)
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

__all__ = ["readable_options"]

_GAP = 2
"""Spaces between an option's names and its help."""


@contextmanager
def readable_options() -> Iterator[None]:
    """Every options panel Typer prints in the block drawn as an `_OptionsLayout`.

    Typer prints each panel from `rich_utils._print_options_panel`, with a console of its
    own; that console is given a render hook (Rich's own means of rewriting what a
    console prints) for the time of the call.
    """
    print_panel = typer.rich_utils._print_options_panel

    def print_readable_panel(**kwargs: Any) -> None:
        console: Console = kwargs["console"]
        console.push_render_hook(_Relayout())
        try:
            print_panel(**kwargs)
        finally:
            console.pop_render_hook()

    typer.rich_utils._print_options_panel = print_readable_panel
    try:
        yield
    finally:
        typer.rich_utils._print_options_panel = print_panel


@dataclass(frozen=True)
class _Option:
    names: Text
    help: RenderableType


@dataclass(frozen=True)
class _OptionsLayout:
    """Options as names (and type) then help, the help's column chosen at render time,
    when the width is known."""

    options: list[_Option]

    @classmethod
    def of_table(cls, table: Table) -> _OptionsLayout:
        """The options of Typer's table: [required,] long, short, negative long, negative
        short, type, help."""
        *labels, helps = [list(column.cells) for column in table.columns]
        *required, longs, shorts, negative_longs, negative_shorts, types = (
            [_text(cell) for cell in column] for column in labels
        )
        options = []
        for i, help_cell in enumerate(helps):
            names = _joined(", ", longs[i], shorts[i])
            if negative := _joined(", ", negative_longs[i], negative_shorts[i]):
                names = _joined(" / ", names, negative)
            names = _joined(" ", names, types[i])
            if required:
                names = Text.assemble(required[0][i] or " ", " ", names)
            options.append(_Option(names, _paragraph(help_cell)))
        return cls(options)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        longest_word = max(
            (Measurement.get(console, options, option.help).minimum for option in self.options),
            default=0,
        )
        # Names beside their help take at most half the width and leave the help room
        # for its longest word; longer names go on a line of their own.
        widest_beside = max(0, min((width - _GAP) // 2, width - _GAP - longest_word))
        names_width = max(
            (o.names.cell_len for o in self.options if o.names.cell_len <= widest_beside),
            default=widest_beside,
        )
        for option in self.options:
            beside = option.names.cell_len <= names_width
            if not beside:
                yield option.names
            row = Table.grid(padding=(0, _GAP, 0, 0))
            row.add_column(width=names_width, no_wrap=True)
            row.add_column(width=width - names_width - _GAP, overflow="fold")
            row.add_row(option.names if beside else "", option.help)
            yield row


class _Relayout(RenderHook):
    """A console's options panels, their table drawn as an `_OptionsLayout`."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        for renderable in renderables:
            if isinstance(renderable, Panel) and isinstance(renderable.renderable, Table):
                renderable.renderable = _OptionsLayout.of_table(renderable.renderable)
        return renderables


def _text(cell: RenderableType) -> Text:
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return Text(cell)
    raise TypeError(f"an options table's name or type cell is not text: {cell!r}")


def _joined(separator: str, *parts: Text) -> Text:
    """The non-empty parts, separated."""
    return Text(separator).join(part for part in parts if part)


def _paragraph(cell: RenderableType) -> RenderableType:
    """Typer's help cell (the help, env var, default and required strings side by side in
    `Columns`, each on a line of its own when they do not fit) as one paragraph."""
    if not isinstance(cell, Columns):
        return cell
    items = cell.renderables
    if all(isinstance(item, Text) for item in items):
        return Text(" ").join(item for item in items if isinstance(item, Text))
    return Group(*items)
