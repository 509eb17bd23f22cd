"""`client_bound`: the load generator, not the engine, set the pace of some levels.

Independent views of a level: the bench's self-check (schedule lag, event-loop lag or
CPU material against the level's own timing, `client.client_bound`); with it, a worker's
CPU at its limit, its event loop stalled (p99) for four tokens' time, or (open loop)
arrivals later than their own mean spacing; Little's law (in closed loop the mean number
in flight falls short of the concurrency asked when the client is slow to send); and the
engine's own count of running plus waiting requests, which falls short of what the
client believes it had in flight.

A level is client-limited when two views say the load did not reach the engine. When
only the self-check fired and the load did arrive (Little's law and the engine's count
say so), the lag only blurred the client's timestamps: latency percentiles are less
exact, throughput stands, and the finding is information. A client-limited level that
sets the run's result (the knee, the best, the last) makes every other finding about it
suspect: critical.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from servelab.diagnose.actions import bench_action, text_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import Action, Evidence, Finding, FindingKind, Severity, Tally
from servelab.diagnose.signals import fmt, too_few_scrapes

__all__ = [
    "CPU_SATURATED_PCT",
    "ENGINE_SCRAPES",
    "ENGINE_SEEN_SHARE",
    "LITTLE_SHARE",
    "STALLED_TOKENS",
    "STREAMS_PER_WORKER",
    "rule",
]

LITTLE_SHARE = 0.75
"""Little's-law concurrency under this share of the target: slots sat empty. Short levels
lose some at the start and the drain (0.85-0.95 is usual), so only a larger deficit counts."""
ENGINE_SEEN_SHARE = 0.8
"""The engine saw (running + waiting, at most) under this share of the requests the
client had in flight: the requests were late leaving the client."""
ENGINE_SCRAPES = 3
"""The engine's count speaks for a level only over three scrapes or more: a scrape that
lands while finished requests are being replaced (the client's turnaround) sees fewer in
flight at any load, and a closed loop whose requests finish together makes such gaps."""
STREAMS_PER_WORKER = 256
"""The bench's default split: one worker process per 256 streams."""
STALLED_TOKENS = 4.0
"""A p99 event-loop stall of four tokens' time (median TPOT): chunks pile up unread and
arrive at the client in bursts (its median ITL falls towards 0), so what it measured is
its own pace. A stall of one token is a blip the next read absorbs."""
CPU_SATURATED_PCT = 90.0
"""A worker over 90% of a core cannot take more work: its sends and reads queue behind
each other (the bench's own limit). Counted as what it wanted, its CPU time and its wait
for a core, where the run measured the wait: beside another busy program it gets half a
core and still has no room."""

_WEIGHTS = {"self-check": 0.6, "saturated": 0.4, "little": 0.3, "engine": 0.5}
_LAG_ONLY_CONFIDENCE = 0.3


def rule(facts: RunFacts) -> list[Finding]:
    limited = [lv for lv in facts.measured if _limited(lv)]
    lag_only = [lv for lv in facts.measured if _flagged(lv) and lv not in limited]
    if limited:
        return [_limited_finding(facts, limited)]
    if lag_only:
        return [_lag_finding(lag_only)]
    return []


def _flagged(lv: LevelFacts) -> bool:
    """The bench's self-check fired (an imported run has none)."""
    return lv.summary.client is not None and lv.summary.client.client_bound


def _limited(lv: LevelFacts) -> bool:
    return sum(bool(read(lv)) for read in _VIEWS.values()) >= 2


def _saturated(lv: LevelFacts) -> list[Evidence]:
    """With the self-check: a worker's CPU (or its CPU and its wait for a core) at its
    limit, its event loop stalled for several tokens' time (it cannot read the streams as
    fast as they come), or open-loop arrivals later than their own mean spacing (the load
    shape is not the one asked)."""
    client = lv.summary.client
    if client is None or not client.client_bound:
        return []
    source = f"summary.json level {lv.level} client"
    if client.max_cpu_pct >= CPU_SATURATED_PCT:
        return [
            Evidence(
                what="busiest worker's CPU, at its limit",
                value=fmt(client.max_cpu_pct),
                unit="% of a core",
                source=source,
            )
        ]
    if (client.max_cpu_demand_pct or 0.0) >= CPU_SATURATED_PCT:
        return [
            Evidence(
                what="a worker's CPU and its wait for a core, at its limit: another program "
                f"shared its core (its CPU alone {fmt(client.max_cpu_pct)}%)",
                value=fmt(client.max_cpu_demand_pct or 0.0),
                unit="% of a core",
                source=source,
            )
        ]
    tpot = lv.summary.median_tpot_ms
    if lv.closed and tpot and client.p99_loop_lag_ms >= STALLED_TOKENS * tpot:
        return [
            Evidence(
                what=f"p99 event-loop lag, over {STALLED_TOKENS:g}x the median TPOT {tpot:.3g} ms",
                value=fmt(client.p99_loop_lag_ms),
                unit="ms",
                source=source,
            )
        ]
    rate = lv.summary.request_rate
    if not lv.closed and rate and client.p99_schedule_lag_ms >= 1000.0 / rate:
        return [
            Evidence(
                what=f"p99 schedule lag, over the mean arrival gap of {1000 / rate:.3g} ms",
                value=fmt(client.p99_schedule_lag_ms),
                unit="ms",
                source=source,
            )
        ]
    return []


def _limited_finding(facts: RunFacts, limited: list[LevelFacts]) -> Finding:
    tally = Tally()
    for lv in limited:
        for view, read in _VIEWS.items():
            tally.add(view, _WEIGHTS[view], read(lv))
    hits = {lv.level for lv in limited}
    severity = Severity.CRITICAL if _decisive(facts) & hits else Severity.WARNING
    worst = max(limited, key=lambda lv: lv.load)
    missing = []
    if facts.missing.get("metrics"):
        missing.append(
            f"engine metrics: {facts.missing['metrics']} (the engine's view of the load)"
        )
    else:
        missing += too_few_scrapes(limited)
    return Finding(
        kind=FindingKind.CLIENT_BOUND,
        title=f"the load generator limited {len(limited)} level(s), up to {worst.label}",
        severity=severity,
        confidence=tally.confidence,
        evidence=tally.evidence,
        explanation=(
            "The client did not keep the asked load at the engine: its workers were late "
            "sending (schedule or event-loop lag, a saturated CPU), so the engine saw fewer "
            "requests than the level claims and its throughput and latencies describe a "
            "lighter load. Findings about these levels are less certain."
        ),
        actions=_actions(facts, worst),
        missing=missing,
        levels=sorted(hits),
        impact=1.0 if severity is Severity.CRITICAL else 0.5,
    )


def _lag_finding(levels: list[LevelFacts]) -> Finding:
    evidence = [e for lv in levels for e in _self_check(lv)]
    for lv in levels:
        evidence += _delivered(lv)
    return Finding(
        kind=FindingKind.CLIENT_BOUND,
        title=f"the client's own lag was material at {len(levels)} level(s); the load arrived",
        severity=Severity.INFO,
        confidence=_LAG_ONLY_CONFIDENCE,
        evidence=evidence,
        explanation=(
            "The load generator's event loop or sends ran late against these levels' own "
            "inter-token times, so its timestamps are blurred by that much: latency "
            "percentiles (ITL, TTFT) are less exact. The load itself reached the engine "
            "(Little's law and the engine's own count), so throughputs stand."
        ),
        actions=[
            text_action("for exact latencies, run the client on a less loaded machine"),
        ],
        levels=[lv.level for lv in levels],
        impact=0.1,
    )


def _self_check(lv: LevelFacts) -> list[Evidence]:
    client = lv.summary.client
    if client is None or not client.client_bound:
        return []
    source = f"summary.json level {lv.level} client"
    return [
        Evidence(
            what=f"the bench's self-check at {lv.label}",
            value=client.client_bound_reason or "client_bound",
            source=source,
        ),
        Evidence(
            what=f"busiest worker's CPU ({client.workers} worker(s))",
            value=fmt(client.max_cpu_pct),
            unit="% of a core",
            source=source,
        ),
    ]


def _little(lv: LevelFacts) -> list[Evidence]:
    concurrency = lv.summary.concurrency
    if not lv.closed or concurrency is None or concurrency >= LITTLE_SHARE * lv.load:
        return []
    return [_little_evidence(lv)]


def _little_evidence(lv: LevelFacts, *, supports: bool = True) -> Evidence:
    return Evidence(
        what=f"Little's-law concurrency / target at {lv.label}",
        value="n/a" if lv.summary.concurrency is None else fmt(lv.summary.concurrency / lv.load),
        source=f"summary.json level {lv.level} concurrency",
        supports=supports,
    )


def _seen(lv: LevelFacts) -> float | None:
    engine = lv.engine
    if not lv.closed or engine is None or engine.running_max is None:
        return None
    if engine.gauge_samples < ENGINE_SCRAPES:
        return None
    return engine.running_max + (engine.queued_max or 0.0)


def _engine_view(lv: LevelFacts) -> list[Evidence]:
    seen = _seen(lv)
    # None at all while requests completed: the engine's gauges lagged the level.
    if not seen or seen >= ENGINE_SEEN_SHARE * lv.load:
        return []
    return [_engine_evidence(lv, seen)]


def _engine_evidence(lv: LevelFacts, seen: float, *, supports: bool = True) -> Evidence:
    assert lv.engine is not None
    return Evidence(
        what=f"running + waiting at the engine (max) at {lv.label}",
        value=fmt(seen),
        unit="requests",
        source=f"engine metrics ({lv.engine.engine}) level {lv.level}",
        supports=supports,
    )


def _delivered(lv: LevelFacts) -> list[Evidence]:
    """The views that say the load did reach the engine (evidence against a limit)."""
    found = []
    if lv.closed:
        found.append(_little_evidence(lv, supports=False))
    seen = _seen(lv)
    if seen is not None:
        found.append(_engine_evidence(lv, seen, supports=False))
    return found


_VIEWS: dict[str, Callable[[LevelFacts], list[Evidence]]] = {
    "self-check": _self_check,
    "saturated": _saturated,
    "little": _little,
    "engine": _engine_view,
}


def _decisive(facts: RunFacts) -> set[int]:
    """The levels the run's result rests on: the knee, the best, and the last."""
    levels = facts.measured
    if not levels:
        return set()
    best = max(levels, key=lambda lv: lv.summary.total_throughput or 0.0)
    chosen = {best.level, levels[-1].level}
    knee = facts.knee_level()
    if knee is not None:
        chosen.add(knee.level)
    return chosen


def _actions(facts: RunFacts, worst: LevelFacts) -> list[Action]:
    cpus = facts.summary.run.host.get("cpus")
    workers = worst.summary.client.workers if worst.summary.client is not None else None
    wanted = math.ceil(worst.load / STREAMS_PER_WORKER)
    actions = []
    if isinstance(cpus, int) and workers is not None and workers < min(wanted, cpus):
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
