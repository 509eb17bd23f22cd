"""The one severity scale of probe verdicts, engine log events and diagnose findings.

One type, so a report can sort and colour them together. Each kind uses the part of the
scale it needs: verdicts critical to ok, engine events error to info, findings critical
to info.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Severity"]


class Severity(StrEnum):
    """Worst first: `rank` orders them (0 is the worst).

    critical: it limits serving by a large factor, or a run cannot be trusted;
    error: it stops serving (an engine's error); warning: it costs speed or quality;
    info: a fact worth knowing; ok: a check that passed.
    """

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    OK = "ok"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)
