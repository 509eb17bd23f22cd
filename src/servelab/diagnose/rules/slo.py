"""`slo_violation`: at some loads too few requests met the SLOs given to the bench.

A level meets its SLOs when at least 90% of its requests are good (completed, and within
every bound): DistServe's attainment target, and the p90 most SLOs are written against.
The finding names the highest load that meets them (the SLO-bounded capacity) and which
bound broke first: TTFT (queueing or prefill), TPOT (a batch too large for the step) or
E2E (both).
"""

from __future__ import annotations

from servelab.diagnose.actions import knob_action, text_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Action,
    ActionTarget,
    Evidence,
    Finding,
    FindingKind,
    Severity,
)
from servelab.diagnose.signals import fmt

__all__ = ["ATTAINMENT", "rule"]

ATTAINMENT = 0.9
"""The share of good requests a level needs to meet its SLOs."""

_P90 = {"ttft": "p90_ttft_ms", "tpot": "p90_tpot_ms", "e2e": "p90_e2e_latency_ms"}


def rule(facts: RunFacts) -> list[Finding]:
    judged = [lv for lv in facts.levels if lv.summary.good_fraction is not None]
    failing = [lv for lv in judged if (lv.summary.good_fraction or 0.0) < ATTAINMENT]
    if not failing:
        return []
    judged.sort(key=lambda lv: lv.load)
    meeting = [lv for lv in judged if (lv.summary.good_fraction or 0.0) >= ATTAINMENT]
    best = max(meeting, key=lambda lv: lv.load) if meeting else None
    first = min(failing, key=lambda lv: lv.load)
    broken = _broken(first)
    evidence = [
        Evidence(
            what=f"good requests at {lv.label}",
            value=fmt(100 * (lv.summary.good_fraction or 0.0)),
            unit="%",
            source=lv.source,
        )
        for lv in judged
    ] + [evidence for _, evidence in broken]
    held = f"the SLOs hold up to {best.label}" if best else "no level meets the SLOs"
    names = " and ".join(name.upper() for name, _ in broken)
    breaks = f"{names} break{'s' if len(broken) == 1 else ''} first" if broken else "it breaks"
    return [
        Finding(
            kind=FindingKind.SLO_VIOLATION,
            title=f"{held}; {breaks} at {first.label}",
            severity=Severity.WARNING if best else Severity.CRITICAL,
            confidence=0.9,
            evidence=evidence,
            explanation=(
                f"Fewer than {ATTAINMENT:.0%} of the requests met every SLO at "
                f"{len(failing)} level(s). TTFT breaks when requests queue or prompts are "
                "long; TPOT when the batch makes each step too slow for the bound."
            ),
            actions=_actions(facts, [name for name, _ in broken], best),
            levels=[lv.level for lv in failing],
            impact=1 - (first.summary.good_fraction or 0.0),
        )
    ]


def _broken(lv: LevelFacts) -> list[tuple[str, Evidence]]:
    """Each SLO whose p90 is over its bound at this level."""
    found = []
    for name, bound in (lv.summary.slo_ms or {}).items():
        field = _P90.get(name)
        value = getattr(lv.summary, field) if field else None
        if value is not None and value > bound:
            found.append(
                (
                    name,
                    Evidence(
                        what=f"p90 {name.upper()} / its SLO of {bound:g} ms at {lv.label}",
                        value=fmt(value / bound),
                        unit="x",
                        source=lv.source,
                    ),
                )
            )
    return found


def _actions(facts: RunFacts, broken: list[str], best: LevelFacts | None) -> list[Action]:
    actions = []
    if "tpot" in broken and best is not None:
        actions.append(
            knob_action(
                facts.engine,
                "max_running_requests",
                int(best.load),
                f"smaller batches keep TPOT within its SLO: cap running requests at {best.load:g}",
            )
        )
    if "ttft" in broken:
        actions.append(
            text_action(
                "TTFT breaks under queueing: serve fewer requests per replica (more replicas) "
                "or shorten the prompts' prefill (prefix cache, smaller chunks)",
                ActionTarget.ENGINE,
            )
        )
    if best is not None:
        actions.append(text_action(f"plan capacity at {best.label} per replica for these SLOs"))
    return actions
