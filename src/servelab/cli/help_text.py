"""Help texts as paragraphs, so the terminal wraps them at its own width.

Docstrings and option help are written hard-wrapped at the source's line length; Rich
wraps them again at the terminal's width and keeps each source line break, which leaves a
short line in the middle of a paragraph wherever the two widths differ. Each paragraph is
made one line here, once, for every command of the Click tree the app builds.

What stays on lines of its own: a paragraph that begins with Click's `\\b` (no rewrapping),
list items (`- `, `* `, `1. `), and an indented block (an example command) line by line. A
line indented to a list item's text continues that item.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

__all__ = ["unwrap_help", "unwrap_tree"]

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_LIST_ITEM = re.compile(r"(?:[-*•]|\d+[.)])[ \t]+")
_NO_REWRAP = "\b"
"""Click's marker: the paragraph it begins is printed as written."""


def unwrap_help(text: str) -> str:
    """`text` with single line breaks inside a paragraph made spaces; blank lines kept."""
    paragraphs = _PARAGRAPH_BREAK.split(inspect.cleandoc(text))
    return "\n\n".join(_unwrap_paragraph(paragraph) for paragraph in paragraphs)


def unwrap_tree(command: Any) -> None:
    """Unwrap the help of `command`, its parameters and, for a group, every subcommand."""
    for name in ("help", "short_help", "epilog"):
        if text := getattr(command, name, None):
            setattr(command, name, unwrap_help(text))
    for param in command.params:
        if text := getattr(param, "help", None):
            param.help = unwrap_help(text)
    for subcommand in getattr(command, "commands", {}).values():
        unwrap_tree(subcommand)


def _unwrap_paragraph(paragraph: str) -> str:
    if paragraph.startswith(_NO_REWRAP):
        return paragraph
    lines: list[str] = []
    continuation_indent: int | None = 0
    for line in paragraph.splitlines():
        indent = len(line) - len(line.lstrip())
        item = _LIST_ITEM.match(line, indent)
        if lines and item is None and indent == continuation_indent:
            lines[-1] += " " + line.strip()
            continue
        lines.append(line.rstrip())
        continuation_indent = _continuation_indent(indent, item)
    return "\n".join(lines)


def _continuation_indent(indent: int, item: re.Match[str] | None) -> int | None:
    """Where a line must start to continue this one: a list item's text, plain text's
    margin; an indented block's lines never continue each other (None)."""
    if item is not None:
        return item.end()
    return 0 if indent == 0 else None
