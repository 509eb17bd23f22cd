"""The engine's limits ranked by the twin: each lifted in the replay, the one whose
lifting moves the objective most named as binding, and every action on a limit given the
replay at its new value as its expected gain.

The rules for the running cap, the KV cache and the step budget still read their signals;
where the twin replays the run, those signals are evidence and the replay decides. A limit
the replay says binds is a finding even where its rule's checks did not fire; a limit whose
lifting moves nothing is set but not binding. Where a lift's gain is within the replay's
own miss of the run, the replay cannot speak for that limit, the rule's finding stands as
it was, and the diagnosis says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servelab.core.errors import ConfigError
from servelab.diagnose.actions import knob_action
from servelab.diagnose.check import level_label
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import Evidence, ExpectedGain, Finding, FindingKind, Severity
from servelab.diagnose.whatif_run import KNOB_LIMITS
from servelab.model.deployment import DEFAULT_MEM_FRACTION
from servelab.twin import Twin
from servelab.twin.compare import REPRODUCED
from servelab.twin.lifting import (
    Lift,
    Objective,
    changes_text,
    lift_limits,
    lifted_value,
    metric_name,
    objective_misses,
)
from servelab.twin.model import Reading
from servelab.twin.whatif import (
    Forecast,
    WhatIf,
    launch_saved,
    launch_saved_with_batch,
    threads_scaled,
    what_if,
    what_if_step,
)

__all__ = ["LIMIT_KINDS", "expected_gains", "machine_ceilings", "rank_by_replay"]

LIMIT_KINDS = {
    "running_cap": FindingKind.RUNNING_REQUEST_CAP,
    "kv_capacity_tokens": FindingKind.KV_CAPACITY,
    "batch_tokens": FindingKind.BATCH_TOKEN_BUDGET,
}
_LIMIT_KNOBS = {
    "running_cap": "max_running_requests",
    "kv_capacity_tokens": "kv_cache_tokens",
    "batch_tokens": "max_batch_tokens",
}
_STATED = ("median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms", "total_throughput")
_LOWER_IS_BETTER = {"median_ttft_ms", "median_tpot_ms", "median_e2e_latency_ms"}
_SOURCE = "twin replay"
_REPLAY_CONFIDENCE = 0.8
"""A finding the replay alone raised: one source, a model of the engine fitted to the run;
below what several independent signals give (`combine` stops at 0.95)."""


def rank_by_replay(
    findings: Sequence[Finding], twin: Twin, facts: RunFacts
) -> tuple[list[Finding], list[str]]:
    """The findings with each set limit's lift applied, and notes on what the replay said."""
    if twin.result.fit.source == "level summaries":
        return list(findings), [
            "the twin was fitted from level summaries alone (no requests.jsonl), whose "
            "replay runs requests of each level's mean sizes: the limits are not ranked by "
            "it, and each limit's rule stands as it read the run"
        ]
    objective = Objective.of(twin.levels, facts.knee.concurrency)
    misses = objective_misses(twin, objective)
    if misses:
        return list(findings), [
            f"the replay does not reproduce the run where the objective is read "
            f"({'; '.join(misses)}; the bar is {REPRODUCED:.0%}): the limits are not ranked "
            "by it, and the signals from outside the engine (host, client, CPU) and each "
            "limit's rule stand as they read the run"
        ]
    lifts = lift_limits(twin, objective, ceilings=machine_ceilings(facts))
    out = list(findings)
    notes: list[str] = []
    top = next((lift for lift in lifts if lift.binding), None)
    for lift in lifts:
        kind = LIMIT_KINDS[lift.limit]
        existing = next((f for f in out if f.kind is kind), None)
        if lift.too_small:
            notes.append(
                f"lifting {lift.limit} in the replay moves {'; '.join(lift.gains())}, no "
                "more than the replay misses the run there: the replay cannot rank it, "
                f"and {kind.value}'s own signals stand"
            )
            continue
        if lift.binding:
            severity = Severity.CRITICAL if lift is top else Severity.WARNING
            finding = _binding(existing, lift, severity, facts, twin)
        else:
            finding = _not_binding(existing, lift)
        out = [f for f in out if f is not existing] + [finding]
    out = [_with_thread_gains(_with_graph_gains(f, twin, objective), twin, objective) for f in out]
    return out, notes


def _with_graph_gains(finding: Finding, twin: Twin, objective: Objective) -> Finding:
    """CUDA graphs on, replayed: the rule's single-stream step with graphs at its two ends
    (from the model's launch and kernel floors) is a per-step saving; the fitted cost less
    each, replayed at every level, is what graphs do where steps are batched."""
    gain = finding.expected_gain
    if finding.kind is not FindingKind.LAUNCH_OVERHEAD or gain is None or gain.low is None:
        return finding
    if gain.high is None or gain.low <= 1.0 or gain.at is None:
        return finding
    level = next((lv for lv in twin.levels if level_label(lv) == gain.at), None)
    tpot = level.median_tpot_ms if level is not None else None
    if not tpot:
        return finding
    least, most = (tpot - tpot / factor for factor in (gain.low, gain.high))
    ends = [launch_saved(least), launch_saved(most)]
    why = (
        f"CUDA graphs replayed: a step saves {least:.3g}-{most:.3g} ms of its fitted "
        f"per-step cost (the rule's ends at {gain.at}, from the model's launch and kernel "
        "floors)"
    )
    if twin.floor is not None:
        ends[1] = launch_saved_with_batch(most, twin.floor)
        why += (
            "; at the far end the graph also takes what each request adds to a step beyond "
            "the model's GPU work for it (launches and host work per request)"
        )
    why += "; the interval spans both ends"
    return _with_step_change(
        finding, twin, objective, ends, why, "CUDA graphs in the replay", measured_only=False
    )


def _with_thread_gains(finding: Finding, twin: Twin, objective: Objective) -> Finding:
    """More threads for a CPU engine, replayed: between a step that does not shrink and one
    that shrinks with the threads (compute scales at most with them), every level replayed,
    so what more threads do to TTFT, TPOT and throughput where steps are batched is each
    a gain with its interval, not only the rule's throughput bound."""
    gain = finding.expected_gain
    if finding.kind is not FindingKind.CPU_BOUND or gain is None or gain.high is None:
        return finding
    if gain.high <= 1.0:
        return finding
    why = (
        f"more threads replayed: a step between as fitted (no part of it divides among "
        f"threads) and {gain.high:.3g}x shorter (all of it does); the interval spans both"
    )
    ends = [None, threads_scaled(gain.high)]
    return _with_step_change(
        finding, twin, objective, ends, why, "more threads in the replay", measured_only=True
    )


def _with_step_change(
    finding: Finding,
    twin: Twin,
    objective: Objective,
    ends: Sequence[Reading | None],
    why: str,
    what: str,
    *,
    measured_only: bool,
) -> Finding:
    """The finding with a change to the step replayed between `ends`: each metric it moves
    at the heaviest level (with `measured_only`, each the run measured) a further gain, and
    `why` its evidence; the finding as it was where nothing moves."""
    whatif = what_if_step(twin, ends, why, metrics=_STATED)
    added = [
        _gain(f, whatif, None)
        for metric in _STATED
        if (f := whatif.forecast(objective.worst_level, metric)) is not None
        and (f.measured or not measured_only)
        and _moves(f)
    ]
    if not added:
        return finding
    said = Evidence(what=what, value=why, source=_SOURCE)
    return finding.model_copy(
        update={
            "expected_gains": [*finding.expected_gains, *added],
            "evidence": [*finding.evidence, said],
        }
    )


def expected_gains(
    twin: Twin, finding: Finding, at_level: int
) -> tuple[list[ExpectedGain], WhatIf | None]:
    """The replay at the value of the finding's first limit action, for each metric the run
    measured at `at_level` that it moves (a rerun can check only what the run measured:
    answers that came whole have no TPOT, and a stream that came in one burst a TPOT of 0)."""
    change = _action_change(finding)
    if change is None:
        return [], None
    whatif = what_if(twin, dict([change]), metrics=_STATED)
    gains = []
    for metric in _STATED:
        forecast = whatif.forecast(at_level, metric)
        if forecast is None or not forecast.measured or not _moves(forecast):
            continue
        gains.append(_gain(forecast, whatif, change))
    return gains, whatif


def _action_change(finding: Finding) -> tuple[str, int] | None:
    for action in finding.actions:
        limit = KNOB_LIMITS.get(action.knob or "")
        if limit is not None and isinstance(action.value, int) and action.available:
            return limit, action.value
    return None


def _moves(forecast: Forecast) -> bool:
    """The fit's draws agree the metric moves (their interval leaves out no change). Where
    the change reaches past the run, the stated interval also spans what the run cannot
    show, and may hold no change: the gain is stated with it, and called extrapolated."""
    low = forecast.fit_low if forecast.fit_low is not None else forecast.low
    high = forecast.fit_high if forecast.fit_high is not None else forecast.high
    assert low is not None and high is not None
    return low > 1 or high < 1


def _gain(forecast: Forecast, whatif: WhatIf, change: tuple[str, int] | None) -> ExpectedGain:
    assert forecast.factor is not None and forecast.low is not None
    assert forecast.high is not None
    lower = forecast.metric in _LOWER_IS_BETTER
    factor = 1 / forecast.factor if lower else forecast.factor
    low, high = (1 / forecast.high, 1 / forecast.low) if lower else (forecast.low, forecast.high)
    reach = f"; extrapolated: {whatif.extrapolated[0]}" if whatif.extrapolated else ""
    at = changes_text(dict([change])) if change is not None else "the changed step"
    return ExpectedGain(
        factor=round(factor, 3),
        metric=metric_name(forecast.metric),
        at=_at(forecast.load),
        source=f"the twin's replay at {at}",
        text=(
            f"{metric_name(forecast.metric)} {factor:.2f}x ({low:.2f}-{high:.2f}) at "
            f"{_at(forecast.load)}, the run's levels replayed at {at}{reach}"
        ),
        low=round(low, 3),
        high=round(high, 3),
    )


def _at(load: str) -> str:
    """The twin's 'rate R/s' as the rules' 'R req/s'."""
    if load.startswith("rate ") and load.endswith("/s"):
        return f"{load.removeprefix('rate ').removesuffix('/s')} req/s"
    return load


def _binding(
    existing: Finding | None, lift: Lift, severity: Severity, facts: RunFacts, twin: Twin
) -> Finding:
    lifted = "no limit" if lift.lifted is None else f"{lift.lifted:,}"
    evidence = [
        Evidence(
            what=f"{lift.limit} lifted from {lift.value:,} to {lifted} in the replay",
            value="; ".join(lift.gains()),
            source=_SOURCE,
        ),
        *[
            Evidence(what="a trade: it makes worse", value=t, source=_SOURCE, supports=False)
            for t in lift.trades
        ],
    ]
    said = (
        f"Replayed with {lift.limit} lifted ({lifted}) and every other limit as set, the run "
        f"moves: {'; '.join(lift.gains())}."
    )
    if lift.trades:
        said += f" It is a trade: {'; '.join(lift.trades)}."
    finding = existing or _raised(lift, facts, twin)
    gains, whatif = expected_gains(twin, finding, _objective_level(lift))
    missing = list(finding.missing)
    if whatif is not None and whatif.extrapolated:
        missing.append(f"extrapolated: {whatif.extrapolated[0]}")
    if whatif is not None:
        missing += whatif.notes
    update: dict[str, object] = {
        "severity": severity,
        "impact": round(1 - math.exp(-lift.score), 3),
        "evidence": [*evidence, *finding.evidence],
        "explanation": f"{said} {finding.explanation}".strip(),
        "missing": missing,
    }
    if gains:
        said_before = finding.expected_gain.metric if finding.expected_gain else None
        gains.sort(key=lambda g: g.metric != said_before)
        update["expected_gain"] = gains[0]
        update["expected_gains"] = gains
    return finding.model_copy(update=update)


def _objective_level(lift: Lift) -> int:
    forecast = lift.latency or lift.throughput
    assert forecast is not None
    return forecast.level


def _raised(lift: Lift, facts: RunFacts, twin: Twin) -> Finding:
    """A finding for a limit the replay says binds where its rule raised none."""
    kind = LIMIT_KINDS[lift.limit]
    value = lift.lifted if lift.lifted is not None else _needed(twin, lift.limit)
    action = knob_action(
        facts.engine,
        _LIMIT_KNOBS[lift.limit],
        value,
        f"lift {lift.limit} to what the heaviest level uses",
    )
    return Finding(
        kind=kind,
        title=f"{lift.limit} ({lift.value:,}) binds: lifting it moves the run in the replay",
        severity=Severity.WARNING,
        confidence=_REPLAY_CONFIDENCE,
        evidence=[],
        explanation="",
        actions=[action],
        levels=[lv.level for lv in twin.levels],
    )


def _needed(twin: Twin, limit: str) -> int:
    """What the run's requests need of a limit the machine does not cap: the longest prompt
    whole beside every request decoding, or every request in flight at once at its full
    length (`lifted_value` without a ceiling)."""
    return lifted_value(twin, limit) or 1


def machine_ceilings(facts: RunFacts) -> dict[str, int]:
    """The most the machine allows of each limit, where the deployment's model knows it:
    the cache the engine's own rule sizes at the default memory share (a share of total or
    of free memory, as that engine reads it)."""
    model = facts.model
    if model is None:
        return {}
    share = DEFAULT_MEM_FRACTION if model.share is not None else None
    try:
        return {"kv_capacity_tokens": model.kv_capacity_tokens(share)}
    except ConfigError:
        return {}


def _not_binding(existing: Finding | None, lift: Lift) -> Finding:
    lifted = "no limit" if lift.lifted is None else f"{lift.lifted:,}"
    what = f"{lift.limit} lifted from {lift.value:,} to {lifted} in the replay"
    if lift.lifted == lift.value:
        what = f"{lift.limit} ({lift.value:,}) already takes the longest prompt whole"
    evidence = Evidence(
        what=what,
        value="; ".join(lift.gains()) or "nothing moves",
        source=_SOURCE,
        supports=False,
    )
    kind = LIMIT_KINDS[lift.limit]
    title = f"{lift.limit} ({lift.value:,}) is set but not binding"
    said = f"Replayed with {lift.limit} lifted ({lifted}), the objective does not move."
    if lift.lifted == lift.value:
        said = (
            f"{lift.limit} already takes the longest prompt whole beside every request "
            "decoding, so no prompt is split; a larger one only lets more whole prompts share "
            "a step, whose memory the run does not show."
        )
    if existing is None:
        return Finding(
            kind=kind,
            title=title,
            severity=Severity.INFO,
            confidence=_REPLAY_CONFIDENCE,
            evidence=[evidence],
            explanation=said,
        )
    return existing.model_copy(
        update={
            "title": f"{title} (its rule read: {existing.title})",
            "severity": Severity.INFO,
            "impact": 0.0,
            "evidence": [evidence, *existing.evidence],
            "explanation": f"{said} {existing.explanation}",
        }
    )
