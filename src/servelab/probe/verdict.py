"""A verdict: one finding about the machine that an engineer can act on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.severity import Severity

__all__ = ["Severity", "Verdict"]


class Verdict(BaseModel):
    """A finding: what was seen, what it means for serving, and what to try."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Stable identifier, e.g. 'p2p-not-supported'.")
    severity: Severity
    title: str = Field(description="One line: the finding.")
    evidence: list[str] = Field(description="The facts that led to it, as read.")
    meaning: str = Field(description="What it costs a serving deployment, and why.")
    action: str = Field(description="What to try.")
    subjects: list[str] = Field(
        default_factory=list, description="What it is about: 'host', 'gpu0', 'gpu0-gpu1'."
    )
