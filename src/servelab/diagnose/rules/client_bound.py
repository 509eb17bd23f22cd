"""`client_bound`: the load generator, not the engine, set the pace of some levels.

Three independent views: the bench's self-check (schedule lag, event-loop lag, CPU of its
busiest worker), Little's law (in closed loop the mean number in flight falls short of
the concurrency asked when the client is slow to send), and the engine's own count of
running plus waiting requests, which falls short of what the client believes it sent.
When the level that sets the result (the knee, or the best) is client-bound, every
other finding about it is suspect, so this one goes first.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from servelab.diagnose.actions import bench_action, text_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import Action, Evidence, Finding, FindingKind, Severity, combine
from servelab.diagnose.signals import fmt

__all__ = ["ENGINE_SEEN_SHARE", "LITTLE_SHARE", "STREAMS_PER_WORKER", "rule"]

LITTLE_SHARE = 0.75
"""Little's-law concurrency under this share of the target: slots sat empty. Short levels
lose some at the start and the drain (0.85-0.95 is usual), so only a larger deficit counts."""
ENGINE_SEEN_SHARE = 0.8
"""The engine saw (running + waiting, at most) under this share of the requests the
client had in flight: the requests were late leaving the client."""
STREAMS_PER_WORKER = 256
"""The bench's default split: one worker process per 256 streams."""

_WEIGHTS = {"self-check": 0.6, "little": 0.3, "engine": 0.5}


def rule(facts: RunFacts) -> list[Finding]:
    views = {view: [lv for lv in facts.measured if read(lv)] for view, read in _VIEWS.items()}
    # Little's law or the engine's count alone has other explanations (a short level's
    # drain, a proxy in between): without the self-check, both must agree.
    if not views["self-check"] and not (views["little"] and views["engine"]):
        return []
    by_level = {lv.level: lv for found in views.values() for lv in found}
    flagged = sorted(by_level.values(), key=lambda lv: lv.load)
    evidence = [e for lv in flagged for read in _VIEWS.values() for e in read(lv)]
    weights = [_WEIGHTS[view] for view, found in views.items() if found]
    decisive = _decisive(facts)
    hits = {lv.level for lv in flagged}
    severity = Severity.CRITICAL if decisive & hits else Severity.WARNING
    worst = max(flagged, key=lambda lv: lv.load)
    return [
        Finding(
            kind=FindingKind.CLIENT_BOUND,
            title=f"the load generator limited {len(flagged)} level(s), up to {worst.label}",
            severity=severity,
            confidence=combine(*weights),
            evidence=evidence,
            explanation=(
                "The client did not keep the asked load at the engine: its workers were late "
                "sending (schedule or event-loop lag, a saturated CPU), so the engine saw fewer "
                "requests than the level claims and its throughput and latencies describe a "
                "lighter load. Findings about these levels are less certain."
            ),
            actions=_actions(facts, worst),
            missing=[]
            if facts.missing.get("metrics") is None
            else [f"engine metrics: {facts.missing['metrics']} (the engine's view of the load)"],
            levels=sorted(hits),
            impact=1.0 if severity is Severity.CRITICAL else 0.5,
        )
    ]


def _self_check(lv: LevelFacts) -> list[Evidence]:
    client = lv.summary.client
    if not client.client_bound:
        return []
    source = f"summary.json level {lv.level} client"
    return [
        Evidence(
            what=f"p99 schedule lag at {lv.label}",
            value=fmt(client.p99_schedule_lag_ms),
            unit="ms",
            source=source,
        ),
        Evidence(
            what="p99 event-loop lag", value=fmt(client.p99_loop_lag_ms), unit="ms", source=source
        ),
        Evidence(
            what=f"busiest worker's CPU ({client.workers} worker(s))",
            value=fmt(client.max_cpu_pct),
            unit="% of a core",
            source=source,
        ),
    ]


def _little(lv: LevelFacts) -> list[Evidence]:
    if not lv.closed or lv.summary.concurrency >= LITTLE_SHARE * lv.load:
        return []
    return [
        Evidence(
            what=f"Little's-law concurrency / target at {lv.label}",
            value=fmt(lv.summary.concurrency / lv.load),
            source=f"summary.json level {lv.level} concurrency",
        )
    ]


def _engine_view(lv: LevelFacts) -> list[Evidence]:
    engine = lv.engine
    if not lv.closed or engine is None or engine.running_max is None:
        return []
    seen = engine.running_max + (engine.queued_max or 0.0)
    if seen >= ENGINE_SEEN_SHARE * lv.load:
        return []
    return [
        Evidence(
            what=f"running + waiting at the engine (max) at {lv.label}",
            value=fmt(seen),
            unit="requests",
            source=f"engine metrics ({engine.engine}) level {lv.level}",
        )
    ]


_VIEWS: dict[str, Callable[[LevelFacts], list[Evidence]]] = {
    "self-check": _self_check,
    "little": _little,
    "engine": _engine_view,
}


def _decisive(facts: RunFacts) -> set[int]:
    """The levels the run's result rests on: the knee, the best, and the last."""
    levels = facts.measured
    if not levels:
        return set()
    best = max(levels, key=lambda lv: lv.summary.total_throughput)
    chosen = {best.level, levels[-1].level}
    knee = facts.knee_level()
    if knee is not None:
        chosen.add(knee.level)
    return chosen


def _actions(facts: RunFacts, worst: LevelFacts) -> list[Action]:
    cpus = facts.summary.run.host.get("cpus")
    workers = worst.summary.client.workers
    wanted = math.ceil(worst.load / STREAMS_PER_WORKER)
    actions = []
    if isinstance(cpus, int) and workers < min(wanted, cpus):
        actions.append(
            bench_action("--workers", min(wanted, cpus), "spread the streams over more processes")
        )
    actions.append(
        text_action(
            f"run the client where it has free cores ({worst.load:g} streams need about "
            f"{wanted} worker(s) of one core each), or lower the load per client"
        )
    )
    return actions
