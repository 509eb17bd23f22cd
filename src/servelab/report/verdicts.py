"""Probe verdicts for the terminal (Rich); the report draws them in report.sections.machine."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from servelab.core.severity import Severity
from servelab.probe.verdict import Verdict

__all__ = ["SEVERITY_STYLE", "render_verdicts"]

SEVERITY_STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.ERROR: "red",
    Severity.WARNING: "yellow",
    Severity.INFO: "cyan",
    Severity.OK: "green",
}
"""The Rich style of each severity, the same wherever one is shown."""

_MAX_EVIDENCE = 8


def render_verdicts(verdicts: Sequence[Verdict]) -> RenderableType:
    """Each verdict with its evidence (the first few lines) and, unless it is ok, what it
    costs and what to try."""
    parts: list[RenderableType] = [Text("Verdicts", style="bold italic")]
    for verdict in verdicts:
        parts.append(
            Text.assemble(
                (f"{verdict.severity.value.upper():<8} ", SEVERITY_STYLE[verdict.severity]),
                (verdict.title, "bold"),
                (f"  [{verdict.code}]", "dim"),
            )
        )
        for line in verdict.evidence[:_MAX_EVIDENCE]:
            parts.append(Text(f"    · {line}"))
        if len(verdict.evidence) > _MAX_EVIDENCE:
            more = len(verdict.evidence) - _MAX_EVIDENCE
            parts.append(Text(f"    · … {more} more (see --json)"))
        if verdict.severity is not Severity.OK:
            parts.append(Text(f"    why it matters: {verdict.meaning}", style="dim"))
            parts.append(Text(f"    try: {verdict.action}"))
    return Group(*parts)
