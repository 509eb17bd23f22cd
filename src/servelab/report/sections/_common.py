"""What the section builders share: severity as a tone, a level's load as text."""

from __future__ import annotations

from servelab.bench.results import LevelSummary
from servelab.core.severity import Severity
from servelab.report.document import Tone

__all__ = ["load_text", "sentence", "tone_of"]

_TONE: dict[Severity, Tone] = {
    Severity.CRITICAL: "bad",
    Severity.ERROR: "bad",
    Severity.WARNING: "warn",
    Severity.INFO: "info",
    Severity.OK: "good",
}


def tone_of(severity: Severity) -> Tone:
    return _TONE[severity]


def load_text(level: LevelSummary) -> str:
    """'concurrency 16' or '4 req/s'."""
    if level.max_concurrency is not None:
        return f"concurrency {level.max_concurrency}"
    return f"{level.request_rate:g} req/s"


def sentence(text: str) -> str:
    """A clause as a sentence: 'the knee is at 16' -> 'The knee is at 16.'"""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
