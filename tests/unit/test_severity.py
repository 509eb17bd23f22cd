"""One severity scale: probe verdicts and engine events share core's type."""

from __future__ import annotations

from servelab.core.severity import Severity
from servelab.engines.signatures import EventSeverity
from servelab.probe.verdict import Severity as VerdictSeverity


def test_verdicts_and_engine_events_share_one_type() -> None:
    assert VerdictSeverity is Severity
    assert EventSeverity is Severity


def test_rank_orders_worst_first() -> None:
    ranked = sorted(Severity, key=lambda severity: severity.rank)
    assert ranked == [
        Severity.CRITICAL,
        Severity.ERROR,
        Severity.WARNING,
        Severity.INFO,
        Severity.OK,
    ]
