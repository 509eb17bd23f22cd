"""report.md: the same report as Markdown, its plots as PNG files beside it.

Every string is scrubbed of secrets, then escaped for Markdown and for the HTML a
Markdown viewer lets through (`<`, `>`, `&`), and table cells for `|`; code goes into
fences longer than any run of backticks inside it.
"""

from __future__ import annotations

import re

from servelab.core.redact import scrub
from servelab.report.document import (
    Block,
    Bullets,
    Code,
    Figure,
    KeyValues,
    Paragraph,
    Report,
    Section,
    Table,
)
from servelab.report.plots import Plot

__all__ = ["PLOTS_DIR", "render_markdown"]

PLOTS_DIR = "plots"
"""Where report.md's PNG plots go, beside it."""

_SPECIAL = re.compile(r"([\\`*_\[\]#|!~])")
_MARK = {"good": "✅ ", "bad": "❌ ", "warn": "⚠️ ", "info": "", "plain": ""}


def render_markdown(report: Report) -> tuple[str, list[Plot]]:
    """The text, and the plots it refers to as `plots/<key>.png` (for the caller to write)."""
    plots: list[Plot] = []
    lines = [f"# {_text(report.title)}", "", _text(report.subtitle), ""]
    if report.headline:
        lines += [f"- {_MARK[tone]}{_text(text)}" for tone, text in report.headline] + [""]
    lines.append(" · ".join(f"[{_text(s.title)}](#{s.key})" for s in report.sections))
    for number, section in enumerate(report.sections, 1):
        lines += ["", f'<a id="{section.key}"></a>', "", f"## {number}. {_text(section.title)}"]
        lines += _section(section, plots)
        for sub in section.subsections:
            lines += ["", f"### {_text(sub.title)}"]
            lines += _section(sub, plots)
    lines += ["", "---", "", f"Written by {_text(report.generator)}."]
    return "\n".join(lines) + "\n", plots


def _section(section: Section, plots: list[Plot]) -> list[str]:
    lines: list[str] = []
    for block in section.blocks:
        lines += ["", *_block(block, plots)]
    return lines


def _block(block: Block, plots: list[Plot]) -> list[str]:
    if isinstance(block, Paragraph):
        return [_MARK[block.tone] + _text(block.text)]
    if isinstance(block, Bullets):
        lines = []
        for tone, text, sub in block.items:
            lines.append(f"- {_MARK[tone]}{_text(text)}")
            lines += [f"  - {_text(line)}" for line in sub]
        return lines
    if isinstance(block, KeyValues):
        return ["| | |", "|---|---|", *(f"| **{_cell(k)}** | {_cell(v)} |" for k, v in block.rows)]
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Code):
        ticks = (len(m) for m in re.findall(r"`+", block.text))
        fence = "`" * max(3, 1 + max(ticks, default=0))
        return [fence + block.language, scrub(block.text).rstrip("\n"), fence]
    if isinstance(block, Figure):
        plots.append(block.plot)
        path = f"{PLOTS_DIR}/{block.plot.key}.png"
        return [
            f"![{_text(block.plot.title)}]({path})",
            "",
            f"*{_text(block.plot.title)}.* {_text(block.plot.caption)}",
        ]
    raise TypeError(f"unknown block {type(block).__name__}")


def _table(table: Table) -> list[str]:
    lines = [f"**{_text(table.caption)}**", ""] if table.caption else []
    align = ["---:" if i in table.right else "---" for i in range(len(table.header))]
    lines.append("| " + " | ".join(_cell(h) for h in table.header) + " |")
    lines.append("|" + "|".join(align) + "|")
    for r, row in enumerate(table.rows):
        cells = [
            f"**{_cell(cell)}**" if (r, c) in table.bad and cell else _cell(cell)
            for c, cell in enumerate(row)
        ]
        mark = _MARK[table.tones[r]] if table.tones else ""
        if mark and cells:
            cells[0] = mark + cells[0]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _text(text: str) -> str:
    """Plain text as Markdown that shows it as written, secrets masked first (escaped, a
    secret would no longer be found by the file's scrubber)."""
    escaped = scrub(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", escaped)


def _cell(text: str) -> str:
    return _text(text).replace("\n", "<br>")
