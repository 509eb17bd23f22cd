"""`accuracy_warning`: the engine said its output may be wrong, not only slow.

DeepGEMM fed scales of another format (SGLang converts them, which can cost accuracy on
Blackwell) or NaN in the logits. The log line is the evidence; a speed benchmark cannot
see output quality, so the action is to measure it.
"""

from __future__ import annotations

from servelab.diagnose.actions import text_action
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import Evidence, Finding, FindingKind, Severity, Tally
from servelab.engines.signatures import KIND_INFO, EventKind

__all__ = ["rule"]

_KINDS = {
    EventKind.DEEPGEMM_SCALE_FORMAT: Severity.WARNING,
    EventKind.NAN: Severity.CRITICAL,
}


def rule(facts: RunFacts) -> list[Finding]:
    findings = []
    for kind, severity in _KINDS.items():
        events = facts.events_of(kind)
        if not events:
            continue
        tally = Tally()
        tally.add(
            "log",
            0.8,
            [
                Evidence(
                    what=f"{kind.value} ({event.engine}, x{event.count})",
                    value=event.text[:240],
                    source=f"engine.log line {event.line_no}",
                )
                for event in events
            ],
        )
        info = KIND_INFO[kind]
        findings.append(
            Finding(
                kind=FindingKind.ACCURACY_WARNING,
                title=f"the engine warns about its output: {kind.value.replace('_', ' ')}",
                severity=severity,
                confidence=tally.confidence,
                evidence=tally.evidence,
                explanation=info.meaning,
                actions=[
                    text_action(info.advice),
                    text_action("measure output quality (a small evaluation set) before and after"),
                ],
                missing=["output quality is not measured by a speed benchmark"],
                impact=0.0,
            )
        )
    return findings
