"""`errors`: requests failed; throughput and latency only count the ones that did not.

The failure share of a level is failed / (completed + failed). Whether it grows with load
tells overload (timeouts, out of memory, a queue limit) from a fault that hits any load
(a bad request, a broken proxy, an engine bug); the engine's log, when there, names it.
"""

from __future__ import annotations

from servelab.diagnose.actions import bench_action, text_action
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
from servelab.engines.signatures import EventKind

__all__ = ["ERROR_CRITICAL_SHARE", "ERROR_WARNING_SHARE", "LOAD_GROWTH", "rule"]

ERROR_WARNING_SHARE = 0.01
"""At 1% failed the level's throughput and tail latencies are off by about as much: past
the noise of a short level."""
ERROR_CRITICAL_SHARE = 0.10
"""At 10% failed the level's numbers describe a different workload from the one asked."""
LOAD_GROWTH = 2.0
"""The failure share at the highest load this many times the lowest's: load-related."""

_FATAL_EVENTS = (
    EventKind.ENGINE_HANG,
    EventKind.KV_SIZE_NEGATIVE,
    EventKind.OUT_OF_MEMORY,
    EventKind.KV_CACHE_SIZING_FAILED,
    EventKind.ENGINE_ERROR,
    EventKind.NCCL_ERROR,
    EventKind.KV_CACHE_FULL,
)


def rule(facts: RunFacts) -> list[Finding]:
    failing = [lv for lv in facts.levels if (lv.summary.failed or 0) > 0]
    if not failing:
        return _hung(facts)
    shares = {lv.level: _share(lv) for lv in facts.levels}
    worst = max(failing, key=lambda lv: shares[lv.level])
    worst_share = shares[worst.level]
    dead = [lv for lv in facts.levels if lv.summary.completed == 0 and (lv.summary.failed or 0) > 0]
    if worst_share >= ERROR_CRITICAL_SHARE or dead:
        severity = Severity.CRITICAL
    elif worst_share >= ERROR_WARNING_SHARE:
        severity = Severity.WARNING
    else:
        severity = Severity.INFO
    evidence = [_level_evidence(lv, shares[lv.level]) for lv in failing]
    kinds = sorted({kind for lv in failing for kind in lv.summary.errors})
    first = failing[0]
    for kind, example in first.summary.error_examples.items():
        evidence.append(
            Evidence(what=f"first {kind} error", value=example[:200], source=first.source)
        )
    load_related = _load_related(facts, shares)
    if load_related is not None:
        evidence.append(load_related)
    for event in facts.events_of(*_FATAL_EVENTS):
        evidence.append(
            Evidence(
                what=event.kind.value,
                value=event.text[:200],
                source=f"engine.log line {event.line_no}",
            )
        )
    missing = [] if facts.events is not None else [f"engine log: {facts.missing.get('log', '')}"]
    grows = load_related is not None and load_related.supports
    how = (
        "they grow with load: the engine (or something before it) gives up under pressure"
        if grows
        else "they appear at every load: a fault, not overload"
    )
    return [
        Finding(
            kind=FindingKind.ERRORS,
            title=f"{worst_share:.0%} of requests failed at {worst.label} ({', '.join(kinds)})",
            severity=severity,
            confidence=0.9,
            evidence=evidence,
            explanation=(
                f"Failed requests are left out of every throughput and latency figure, so the "
                f"levels that had them measured a lighter load than asked; {how}."
            ),
            actions=_actions(kinds, grows),
            missing=missing,
            levels=[lv.level for lv in failing],
            impact=min(1.0, worst_share),
        )
    ]


def _hung(facts: RunFacts) -> list[Finding]:
    """A hang the engine's log reports as an error (SGLang's watchdog, vLLM's engine core
    not answering; not a soft watchdog's dump or a slow broadcast, which it survives) where
    no request failed: the requests in flight waited it out, so the levels around it
    measured the stall."""
    hangs = [e for e in facts.events_of(EventKind.ENGINE_HANG) if e.severity == "error"]
    if not hangs:
        return []
    first = hangs[0]
    what = str(first.fields.get("what") or "the engine")
    return [
        Finding(
            kind=FindingKind.ERRORS,
            title=f"the engine hung ({what}, {sum(e.count for e in hangs)}x in its log)",
            severity=Severity.CRITICAL,
            confidence=0.8,
            evidence=[
                Evidence(
                    what=event.kind.value,
                    value=event.text[:200],
                    source=f"engine.log line {event.line_no} (x{event.count})",
                )
                for event in hangs
            ],
            explanation=(
                "The engine's own watchdog says a step did not finish in its time: every "
                "request in flight waited for it, so the latencies around it measured the "
                "stall, not the engine's speed."
            ),
            actions=[
                text_action(
                    "read the engine's log before the hang (a collective waiting on a peer, a "
                    "rank that died, a kernel that never returned); raise the watchdog's "
                    "timeout only where the step was slow rather than stuck"
                )
            ],
            levels=[lv.level for lv in facts.levels],
            impact=1.0,
        )
    ]


def _share(lv: LevelFacts) -> float:
    completed, failed = lv.summary.completed, lv.summary.failed
    if completed is None or failed is None:
        return 0.0
    total = completed + failed
    return failed / total if total else 0.0


def _level_evidence(lv: LevelFacts, share: float) -> Evidence:
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(lv.summary.errors.items()))
    return Evidence(
        what=f"failed share at {lv.label} ({kinds})",
        value=fmt(100 * share),
        unit="%",
        source=lv.source,
    )


def _load_related(facts: RunFacts, shares: dict[int, float]) -> Evidence | None:
    levels = facts.measured
    if len(levels) < 2:
        return None
    low, high = shares[levels[0].level], shares[levels[-1].level]
    grows = high > 0 and high >= LOAD_GROWTH * max(low, 1e-9)
    return Evidence(
        what=f"failed share at {levels[-1].label} / at {levels[0].label}",
        value="no failures at the lowest load" if low == 0 else fmt(high / low),
        unit=None if low == 0 else "x",
        source=f"{levels[0].source}, {levels[-1].source}",
        supports=grows,
    )


def _actions(kinds: list[str], grows: bool) -> list[Action]:
    actions = []
    if {"timeout", "stall"} & set(kinds):
        actions.append(
            bench_action(
                "--timeout", "1200s", "if the requests were slow rather than stuck, allow more"
            )
        )
    if grows:
        actions.append(
            text_action(
                "lower the load per replica, or read engine.log at the time of the failures",
                ActionTarget.LOAD,
            )
        )
    actions.append(
        text_action("read the error examples and engine.log for the cause; rerun once fixed")
    )
    return actions
