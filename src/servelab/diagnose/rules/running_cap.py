"""`running_request_cap`: the engine's limit on requests running at once made the knee.

The story's plateau: SGLang's `--max-running-requests 64` held the batch at 64 while the
sweep asked for 128, so throughput stopped growing and the extra requests queued. What
shows it, independently:

- the engine's /metrics: running requests flat at R below the load, with requests
  waiting, while the KV cache has room (else it is `kv_capacity`);
- the configuration: the cap in the engine's command or its log, at or below the load;
- the sweep: past the knee TTFT jumps while TPOT stays (the batch did not grow);
- the model: the hardware's ceiling still grows past the knee (so the knee is not its).

It cannot tell a cap from a full KV cache without /metrics or the log's KV size, and says
so; nor a cap from a scheduler that admits slowly for another reason. On an engine that has
no running-request setting at all (transformers serve), the sweep's shape alone is never
read as a cap.
"""

from __future__ import annotations

from servelab.bench.knee import KNEE_GROWTH_PER_DOUBLING
from servelab.diagnose.actions import knob_action, text_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.rules.kv_capacity import KV_MODEL_ROOM, kv_pressure
from servelab.diagnose.signals import (
    fmt,
    held_back,
    model_growth,
    queueing_beyond_knee,
    too_few_scrapes,
)

__all__ = ["CAP_MATCH", "rule"]

CAP_MATCH = 0.05
"""Running counts within 5% (or one request) of the cap are at the cap: metrics are
sampled between steps and a finishing request leaves its slot briefly empty."""

_WEIGHTS = {"metrics": 0.6, "config": 0.5, "sweep": 0.4, "model": 0.3}
_DIRECT = ("metrics", "config", "sweep")


def rule(facts: RunFacts) -> list[Finding]:
    held = [lv for lv in facts.closed if held_back(lv)]
    top_load = max((lv.load for lv in facts.closed), default=0.0)
    cap = facts.engine.running_cap
    binding = cap if cap is not None and cap.value < top_load else None
    queueing = queueing_beyond_knee(facts)
    observed = _observed_cap(held)
    tally = Tally()
    if observed is not None:
        tally.add("metrics", _WEIGHTS["metrics"], [e for lv in held for e in held_back(lv)])
    limit = observed or (binding.value if binding else None)
    if limit is None and _can_have_a_cap(facts):
        limit = _knee_cap(facts, queueing)
    if limit is None:
        return []
    if cap is not None and observed is not None and _below(observed, cap.value):
        return [_not_binding(facts, held, observed, cap.value, cap.source)]
    if cap is not None:
        agrees = binding is not None and (observed is None or _near(observed, cap.value))
        configured = Evidence(
            what="configured running-request cap"
            + ("" if binding else ", above every load tested"),
            value=cap.value,
            unit="requests",
            source=cap.source,
            supports=agrees,
        )
        if agrees:
            tally.add("config", _WEIGHTS["config"], [configured])
        else:
            tally.note(configured)
    tally.add("sweep", _WEIGHTS["sweep"], queueing)
    if not tally.sources:
        return []
    room = _kv_room(facts, limit)
    if "config" not in tally.sources and room is not None and not room.supports:
        return []  # no cap configured, and the cache holds no more: kv_capacity says so
    about = held or facts.after_knee()
    if any(kv_pressure(facts, lv) for lv in about):
        return []  # the cache, not a cap, held the batch: kv_capacity says so
    growth = _growth(facts, limit)
    if growth is not None and growth.supports:
        tally.add("model", _WEIGHTS["model"], [growth])
    else:
        tally.note(growth)
    tally.note(room)
    grows = growth is None or growth.supports
    strong = tally.count(*_DIRECT) >= 2
    severity = Severity.CRITICAL if strong and grows else Severity.WARNING
    new_cap = _new_cap(facts, limit)
    gain = _gain(facts, limit, new_cap)
    return [
        Finding(
            kind=FindingKind.RUNNING_REQUEST_CAP,
            title=f"running requests capped at {limit:g}: "
            + ("the sweep's knee" if facts.knee.found else f"up to {top_load:g} were in flight"),
            severity=severity,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=(
                f"The engine runs at most {limit:g} requests at once; the rest wait for a "
                "slot. Past the cap more concurrency only lengthens the queue (TTFT grows by "
                "whole request times) while the batch, and so the throughput, stays where it "
                "was, although the hardware's ceiling still grows with the batch."
            ),
            actions=[
                knob_action(
                    facts.engine,
                    "max_running_requests",
                    new_cap,
                    f"raise the running-request cap to {new_cap}",
                )
            ],
            expected_gain=gain,
            missing=_missing(facts, observed),
            levels=[lv.level for lv in about],
            impact=max(0.0, 1 - 1 / gain.factor) if gain else 0.3,
        )
    ]


def _not_binding(
    facts: RunFacts, held: list[LevelFacts], observed: float, cap: int, source: str
) -> Finding:
    """Requests waited while the engine ran fewer than its configured cap: the cap is set
    and does not bind, which is information, never the cause."""
    evidence = [e for lv in held for e in held_back(lv)]
    evidence.append(
        Evidence(
            what="configured running-request cap, above what ran",
            value=cap,
            unit="requests",
            source=source,
            supports=False,
        )
    )
    return Finding(
        kind=FindingKind.RUNNING_REQUEST_CAP,
        title=f"the configured cap of {cap} does not bind: at most {observed:g} ran while "
        "requests waited",
        severity=Severity.INFO,
        confidence=_WEIGHTS["metrics"],
        evidence=evidence,
        explanation=(
            f"The engine would run {cap} requests at once, yet ran at most {observed:g} with "
            "others waiting: something else admits no more (a full KV cache, a step's token "
            "budget, the scheduler's own pace). Raising the cap would change nothing."
        ),
        actions=[
            text_action(
                "look at what else holds requests out: kv_capacity and batch_token_budget "
                "read the cache's size and the step budget"
            )
        ],
        missing=_missing(facts, observed),
        levels=[lv.level for lv in held],
        impact=0.05,
    )


def _below(observed: float, cap: int) -> bool:
    """The engine ran well under its configured cap (past the sampling slack): something
    other than the cap kept the requests waiting."""
    return observed < (1 - CAP_MATCH) * cap - 1


def _can_have_a_cap(facts: RunFacts) -> bool:
    """Whether the sweep's shape alone may be read as a cap: not on an engine known to have
    no running-request setting (transformers serve), whose plateau is then something else."""
    return not facts.engine.knobs or "max_running_requests" in facts.engine.knobs


def _near(value: float, cap: float) -> bool:
    return abs(value - cap) <= max(1.0, CAP_MATCH * cap)


def _observed_cap(held: list[LevelFacts]) -> float | None:
    """The running count the held-back levels share, if they share one."""
    peaks = [lv.engine.running_max for lv in held if lv.engine and lv.engine.running_max]
    if not peaks:
        return None
    top = max(peaks)
    return float(round(top)) if all(_near(peak, top) for peak in peaks) else None


def _knee_cap(facts: RunFacts, queueing: list[Evidence]) -> float | None:
    """Without metrics or a configured cap: the knee's concurrency, if the sweep queued."""
    knee = facts.knee_level()
    return knee.load if knee is not None and queueing else None


def _growth(facts: RunFacts, limit: float) -> Evidence | None:
    after = facts.after_knee()
    if not after:
        return None
    growth = model_growth(facts, limit, after[-1].load, after[-1])
    if growth is None:
        return None
    return Evidence(
        what=f"the model's growth per doubling from {limit:g} to {after[-1].load:g}",
        value=fmt(growth),
        unit="x",
        source="model: throughput by concurrency",
        supports=growth >= KNEE_GROWTH_PER_DOUBLING,
    )


def _kv_room(facts: RunFacts, limit: float) -> Evidence | None:
    """How many requests of this size the KV cache holds: more than the cap, or not."""
    levels = facts.after_knee() or facts.closed
    if not levels:
        return None
    lv = levels[-1]
    capacity, source = _capacity(facts, lv)
    if capacity is None:
        return None
    fits = capacity / max(lv.tokens_per_request, 1.0)
    return Evidence(
        what=f"requests of {lv.tokens_per_request:,.0f} tokens the KV cache holds",
        value=int(fits),
        unit="requests",
        source=source,
        supports=fits >= KV_MODEL_ROOM * limit,
    )


def _capacity(facts: RunFacts, lv: LevelFacts) -> tuple[float | None, str]:
    if lv.kv_capacity_tokens:
        return lv.kv_capacity_tokens, "engine metrics: KV capacity"
    if facts.engine.kv_capacity_tokens is not None:
        return float(facts.engine.kv_capacity_tokens.value), facts.engine.kv_capacity_tokens.source
    if facts.model is not None:
        return float(facts.model.kv_capacity_tokens()), facts.model.kv_source
    return None, ""


def _new_cap(facts: RunFacts, limit: float) -> int:
    """The largest load tested, or twice the cap, bounded by what the KV cache holds."""
    top = max((lv.load for lv in facts.closed), default=limit)
    wanted = max(top, 2 * limit)
    lv = (facts.after_knee() or facts.closed)[-1]
    capacity, _ = _capacity(facts, lv)
    if capacity is not None:
        wanted = min(wanted, capacity / max(lv.tokens_per_request, 1.0))
    return max(int(wanted), int(limit) + 1)


def _gain(facts: RunFacts, limit: float, new_cap: int) -> ExpectedGain | None:
    if facts.model is None:
        return _sweep_gain(facts, limit, new_cap)
    lv = (facts.after_knee() or facts.closed)[-1]
    inp, out = round(lv.input_tokens), max(round(lv.output_tokens), 1)
    before = facts.model.total_tokens_per_s(round(limit), inp, out)
    after = facts.model.total_tokens_per_s(new_cap, inp, out)
    if before <= 0 or after <= before:
        return None
    factor = after / before
    text = f"raising the cap to {new_cap}: up to {factor:.1f}x at {new_cap} concurrent"
    fits = facts.model.kv_max_concurrency(inp, out)
    if fits >= 2 * new_cap:
        further = facts.model.total_tokens_per_s(fits, inp, out) / before
        text += f"; the KV cache holds {fits:,} such requests, up to {further:.1f}x there"
    # The model is a ceiling on speed: against what the run measured at that load, the
    # most the new cap can give is the model's throughput there over the measured one.
    at = next((level for level in facts.closed if level.load == new_cap), lv)
    measured = at.summary.total_throughput or 0.0
    most = max(factor, after / measured) if measured > 0 else factor
    return ExpectedGain(
        factor=fmt(factor),
        metric="total throughput",
        at=f"concurrency {new_cap}",
        source="model",
        text=text + f", per the model (at most {most:.2g}x of what this run measured there)",
        low=1.0,
        high=fmt(most),
    )


def _sweep_gain(facts: RunFacts, limit: float, new_cap: int) -> ExpectedGain | None:
    """Without the model: the most a larger cap gives is every admitted request running at
    the same TPOT, throughput growing with the running count, at the heaviest level the
    new cap still admits; the least is no gain."""
    levels = [lv for lv in facts.closed if lv.load > limit]
    if not levels or limit < 1:
        return None
    lv = max(levels, key=lambda level: min(level.load, new_cap))
    most = min(lv.load, new_cap) / limit
    if most <= 1:
        return None
    return ExpectedGain(
        factor=fmt(most),
        metric="total throughput",
        at=lv.label,
        source="the sweep (no model: an upper bound)",
        text=f"raising the cap to {new_cap}: at most {most:.2g}x at {lv.label}, if every "
        "admitted request ran at the same TPOT (no model to say how the step grows)",
        low=1.0,
        high=fmt(most),
    )


def _missing(facts: RunFacts, observed: float | None) -> list[str]:
    missing = []
    if observed is None and facts.missing.get("metrics"):
        missing.append(
            f"engine metrics: {facts.missing['metrics']}; without running and waiting counts a "
            "cap cannot be told from a full KV cache"
        )
    if observed is None and not facts.missing.get("metrics"):
        missing += too_few_scrapes(facts.closed)
    if facts.missing.get("model"):
        missing.append(f"model: {facts.missing['model']}; no expected gain")
    return missing
