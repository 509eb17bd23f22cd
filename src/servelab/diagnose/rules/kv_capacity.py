"""`kv_capacity`: the KV cache was full, so the engine could not run more requests at once.

Each running request holds its prompt and its output so far in the cache; when the cache
is full, newcomers wait (SGLang, the simulator) or running ones are preempted and
recomputed (vLLM, SGLang's retractions). What shows it:

- the engine's KV usage near full at a level where requests waited, or the cache size its
  usage implies (running x tokens held per request / usage) holding no more requests
  than ran;
- preemptions (vLLM's counter) or retractions in the log;
- the cache's size (the log's, or /metrics') over the tokens of one request: no more
  requests fit than ran, and fewer than the level asked;
- the sweep's queueing past the knee, and the model's KV capacity near the knee;
- without a knee or engine counts: TTFT growing by whole request times from one level to
  the next while TPOT stays (newcomers waited outside the batch), at a level the cache's
  configured size (the engine's log or command) holds fewer requests of than it sent.

Where the engine reports no cache size but the run configured a memory share, the model's
cache at that share (by that engine's own rule, `servelab.model.configured_cache`) stands
in for it, weighed as the model's and named so in the evidence.

The first action sizes the cache in tokens (`kv_cache_tokens`: every engine servelab
launches takes it, on the GPU and the CPU) for the heaviest level's requests; a memory
share (`mem_fraction`) is offered only where the engine takes one on its device, with the
share that holds them and its gain per the model where a share was configured.

It cannot tell a full cache from a running cap without /metrics or the log's KV size.
"""

from __future__ import annotations

import itertools
import math

from servelab.diagnose.actions import flag_name_action, knob_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Action,
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.signals import (
    admission_wait,
    engine_on_cpu,
    fmt,
    held_back,
    queueing_beyond_knee,
    too_few_scrapes,
)
from servelab.model import KvDtype

__all__ = ["KV_FIT_SHARE", "KV_FULL", "KV_MODEL_ROOM", "kv_pressure", "rule"]

KV_FULL = 0.9
"""KV usage at or above this is full: engines admit until the pool is used, keeping a
small reserve (vLLM's watermark, SGLang's decode headroom) and whole pages."""
KV_FIT_SHARE = 0.7
"""The running count reached at least this share of the requests the cache holds: the
cache, not something else, was the limit (requests of uneven length fit unevenly)."""
KV_MODEL_ROOM = 1.5
"""The model's cache holding at least this many times the running count means room: the
model's capacity is an estimate (engines reserve memory it does not know about)."""
KV_HEADROOM = 1.25
"""The cache the action asks for holds the heaviest level's requests with a quarter to
spare: engines keep a reserve (vLLM's watermark) and round to whole blocks, and request
lengths vary about their mean."""
FP8_KV = "fp8_e4m3"
"""A KV cache dtype both SGLang and vLLM accept."""

_WEIGHTS = {
    "usage": 0.6,
    "preemption": 0.6,
    "capacity": 0.5,
    "held": 0.4,
    "sweep": 0.4,
    "model": 0.3,
}
_DIRECT = ("usage", "preemption", "capacity", "sweep")


def kv_pressure(facts: RunFacts, lv: LevelFacts) -> dict[str, list[Evidence]]:
    """The direct signs of a full cache at one level, by source."""
    found: dict[str, list[Evidence]] = {}
    engine = lv.engine
    if engine is not None and engine.kv_usage_max is not None and engine.kv_usage_max >= KV_FULL:
        found["usage"] = [
            Evidence(
                what=f"KV cache usage (max) at {lv.label}",
                value=fmt(100 * engine.kv_usage_max),
                unit="%",
                source=f"engine metrics ({engine.engine}) level {lv.level}",
            )
        ]
    elif (implied := _usage_fit(lv)) is not None:
        found["usage"] = [implied]
    if lv.preemptions:
        found["preemption"] = [
            Evidence(
                what=f"preemptions during {lv.label}",
                value=lv.preemptions,
                unit="requests",
                source="engine metrics: vllm:num_preemptions_total",
            )
        ]
    fit = _fit(facts, lv)
    if fit is not None:
        found["capacity" if _engine_capacity(facts, lv) else "model"] = [fit]
    return found


def rule(facts: RunFacts) -> list[Finding]:
    held = [lv for lv in facts.closed if held_back(lv)]
    waits = _admission_waits(facts)
    about = held or facts.after_knee() or [lv for lv, _ in waits]
    tally = Tally()
    for _, evidence in waits:
        tally.add("sweep", _WEIGHTS["sweep"], evidence)
    for lv in about:
        for source, evidence in kv_pressure(facts, lv).items():
            tally.add(source, _WEIGHTS[source], evidence)
    full_events = [
        Evidence(
            what=event.kind.value,
            value=event.text[:200],
            source=f"engine.log line {event.line_no} (x{event.count})",
        )
        for event in facts.engine.kv_full
    ]
    tally.add("preemption", _WEIGHTS["preemption"], full_events)
    queueing = queueing_beyond_knee(facts)
    running = _running(about)
    if not tally.sources:
        # Held back, and the cap is not it: the model's cache holds about what ran.
        model_says = _model_limit(facts, about, running)
        capped = (
            facts.engine.running_cap is not None
            and running is not None
            and (abs(facts.engine.running_cap.value - running) <= 1)
        )
        if not ((queueing or held) and model_says and not capped):
            return []
        tally.add("model", _WEIGHTS["model"], [model_says])
        tally.add("held", _WEIGHTS["held"], [e for lv in held for e in held_back(lv)])
    else:
        tally.evidence += [e for lv in held for e in held_back(lv)]
    tally.add("sweep", _WEIGHTS["sweep"], queueing)
    if not about:
        severity = Severity.INFO  # retractions in the log, but no level was held back
    elif tally.count(*_DIRECT) >= 2:
        severity = Severity.CRITICAL
    else:
        severity = Severity.WARNING
    gain = _room_gain(facts, about, running) or _gain(facts, about, running)
    missing = []
    if facts.missing.get("metrics"):
        missing.append(f"engine metrics: {facts.missing['metrics']} (KV usage, running counts)")
    else:
        missing += too_few_scrapes(facts.closed)
    if facts.engine.kv_capacity_tokens is None and facts.events is None:
        missing.append(f"engine log: {facts.missing.get('log', 'absent')} (the KV cache's size)")
    where = f" at {running:g} running requests" if running else ""
    return [
        Finding(
            kind=FindingKind.KV_CAPACITY,
            title=f"the KV cache is full{where}: requests wait for room",
            severity=severity,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=(
                "Every running request keeps its prompt and its output so far in the KV "
                "cache. Once the cache is full the engine admits no one until a request "
                "finishes (or preempts one and recomputes it later), so the batch stops "
                "growing with the load: throughput flattens and TTFT grows by whole "
                "request times."
            ),
            actions=_actions(facts, running),
            expected_gain=gain,
            missing=missing,
            levels=[lv.level for lv in about],
            impact=max(0.0, 1 - 1 / gain.factor) if gain else 0.3,
        )
    ]


def _admission_waits(facts: RunFacts) -> list[tuple[LevelFacts, list[Evidence]]]:
    """Levels newcomers waited at for whole requests, which the configured cache cannot
    hold: read where neither a knee nor the engine's counts show the limit."""
    closed = facts.closed
    found = []
    for lower, upper in itertools.pairwise(closed):
        wait = admission_wait(lower, upper)
        if wait and _fit(facts, upper) is not None:
            found.append((upper, wait))
    return found


def _capacity(facts: RunFacts, lv: LevelFacts) -> tuple[float, str] | None:
    """The engine's own KV size, else the model's at the configured memory share."""
    own = _engine_capacity(facts, lv)
    model = facts.model
    if own is not None or model is None or model.share is None:
        return own
    return model.kv_capacity_tokens(), model.kv_source


def _engine_capacity(facts: RunFacts, lv: LevelFacts) -> tuple[float, str] | None:
    """The engine's own KV size: /metrics first, then its log."""
    if lv.kv_capacity_tokens:
        return lv.kv_capacity_tokens, "engine metrics: sglang:max_total_num_tokens"
    conf = facts.engine.kv_capacity_tokens
    if conf is not None:
        return float(conf.value), conf.source
    return None


def _fit(facts: RunFacts, lv: LevelFacts) -> Evidence | None:
    """The cache holds fewer requests of this size than the level asked, and they ran."""
    capacity = _capacity(facts, lv)
    if capacity is None or not lv.closed:
        return None
    tokens, source = capacity
    fits = tokens / max(lv.tokens_per_request, 1.0)
    if fits >= lv.load:
        return None
    running = lv.engine.running_max if lv.engine is not None else None
    if running is not None and running < KV_FIT_SHARE * fits:
        return None
    return Evidence(
        what=f"requests of {lv.tokens_per_request:,.0f} tokens the cache of {tokens:,.0f} holds",
        value=fmt(fits),
        unit="requests",
        source=source,
    )


def _usage_fit(lv: LevelFacts) -> Evidence | None:
    """The cache size the engine's KV usage implies holds about as many requests as ran.

    A running request holds on average its prompt and half its output, so the cache is
    about running x (input + output / 2) / usage tokens; of requests of input + output
    tokens it holds that over their size. Held-back levels only (a queue waited)."""
    engine = lv.engine
    if engine is None or not held_back(lv):
        return None
    usage, running, peak = engine.kv_usage_mean, engine.running_mean, engine.running_max
    if not usage or not running or not peak:
        return None
    tokens = running * (lv.input_tokens + lv.output_tokens / 2) / usage
    fits = tokens / max(lv.tokens_per_request, 1.0)
    if peak < KV_FIT_SHARE * fits:
        return None
    return Evidence(
        what=f"requests the cache holds, from KV usage {100 * usage:.0f}% at {running:.3g} running",
        value=fmt(fits),
        unit="requests",
        source=f"engine metrics ({engine.engine}) level {lv.level}",
    )


def _model_limit(
    facts: RunFacts, about: list[LevelFacts], running: float | None
) -> Evidence | None:
    """The model's cache holds no more than ran (or than the knee's load), when the
    engine's own numbers are missing."""
    knee = facts.knee_level()
    lv = about[-1] if about else knee
    if lv is None or facts.model is None:
        return None
    limit = running or (knee.load if knee is not None else lv.load)
    fits = facts.model.kv_max_concurrency(round(lv.input_tokens), round(lv.output_tokens))
    if fits > KV_MODEL_ROOM * limit:
        return None
    return Evidence(
        what=f"requests of {lv.tokens_per_request:,.0f} tokens the model's KV cache holds",
        value=fits,
        unit="requests",
        source=facts.model.kv_source,
    )


def _running(about: list[LevelFacts]) -> float | None:
    peaks = [lv.engine.running_max for lv in about if lv.engine and lv.engine.running_max]
    return float(round(max(peaks))) if peaks else None


def _actions(facts: RunFacts, running: float | None) -> list[Action]:
    actions = []
    heaviest = max(facts.closed, key=lambda lv: lv.load, default=None)
    if heaviest is not None:
        tokens = _tokens_for(heaviest)
        actions.append(
            knob_action(
                facts.engine,
                "kv_cache_tokens",
                tokens,
                f"size the KV cache for {heaviest.load:g} requests of "
                f"{heaviest.tokens_per_request:,.0f} tokens",
            )
        )
    if engine_on_cpu(facts.summary, facts.probe) is None:
        actions.append(_memory_action(facts, heaviest, running))
    model = facts.model
    if model is None or model.deployment.kv_dtype is KvDtype.BF16:
        actions.append(
            knob_action(
                facts.engine, "kv_cache_dtype", FP8_KV, "halve each token's KV with an fp8 cache"
            )
        )
    return actions


def _memory_action(facts: RunFacts, lv: LevelFacts | None, running: float | None) -> Action:
    """A larger memory share: where the run configured one and the model exists, the least
    share whose cache (by the engine's rule) holds the heaviest level's requests, and what
    the model expects of it; else the flag alone (the run cannot tell the value)."""
    why = "give the KV cache more memory"
    model = facts.model
    share = model.share if model is not None else None
    new = model.share_for(_tokens_for(lv)) if model is not None and lv is not None else None
    if model is None or share is None or lv is None or new is None or new <= share.value:
        return flag_name_action(facts.engine, "mem_fraction", why)
    tokens = model.kv_capacity_tokens(new)
    fits = tokens / max(lv.tokens_per_request, 1.0)
    said = (
        f"{why}, {new:g} instead of {share.value:g}: the model's cache there holds "
        f"{tokens:,} tokens, {fits:.3g} requests of {lv.tokens_per_request:,.0f} tokens"
    )
    held = running or _held(facts, lv)
    if held and held < lv.load:
        inp, out = round(lv.input_tokens), max(round(lv.output_tokens), 1)
        before = model.total_tokens_per_s(max(round(held), 1), inp, out)
        after = model.total_tokens_per_s(round(min(lv.load, fits)), inp, out)
        if before > 0 and after > before:
            said += f", about {after / before:.2g}x total throughput at {lv.label} per the model"
    return knob_action(facts.engine, "mem_fraction", new, said)


def _tokens_for(lv: LevelFacts) -> int:
    """A cache for the level's requests, with headroom, in whole thousands of tokens."""
    return 1024 * math.ceil(lv.load * lv.tokens_per_request * KV_HEADROOM / 1024)


def _room_gain(
    facts: RunFacts, about: list[LevelFacts], running: float | None
) -> ExpectedGain | None:
    """A cache that holds the heaviest level's requests (the first action): throughput
    with them all running against what ran. The estimate is every request admitted at the
    same TPOT (throughput grows with the running count), or the model's throughput at the
    two batches where there is a model. The least is no gain. The most counts against the
    fewer of what ran and what the cache holds at full length, and adds the work the
    level's preemptions threw away: a preempted request runs its tokens again, so fewer
    than the running count may have been doing work that lasted, and each preemption
    discards at most one request's tokens (the level's own work is its completed
    requests')."""
    if not about:
        return None
    lv = max(about, key=lambda level: level.load)
    full = _held(facts, lv)
    held = running or full
    if not held or held >= lv.load:
        return None
    same_tpot = lv.load / held
    redone = (lv.preemptions or 0.0) / max(lv.summary.completed or 0, 1)
    most = (lv.load / min(held, full) if full else same_tpot) * (1.0 + redone)
    factor, how = same_tpot, "every request admitted at the same TPOT"
    if facts.model is not None:
        inp, out = round(lv.input_tokens), max(round(lv.output_tokens), 1)
        before = facts.model.total_tokens_per_s(max(round(held), 1), inp, out)
        after = facts.model.total_tokens_per_s(round(lv.load), inp, out)
        if before > 0 and after > before:
            factor, how = min(after / before, same_tpot), "per the model at the two batches"
    return ExpectedGain(
        factor=fmt(factor),
        metric="total throughput",
        at=lv.label,
        source="the cache's size and the sweep" + (", the model" if facts.model else ""),
        text=f"a cache for all {lv.load:g} requests instead of {held:.3g}: about {factor:.2g}x "
        f"at {lv.label} ({how}; at most {most:.2g}x)",
        low=1.0,
        high=fmt(most),
    )


def _held(facts: RunFacts, lv: LevelFacts) -> float | None:
    """Requests of the level's size the configured cache holds."""
    capacity = _capacity(facts, lv)
    return capacity[0] / max(lv.tokens_per_request, 1.0) if capacity is not None else None


def _gain(facts: RunFacts, about: list[LevelFacts], running: float | None) -> ExpectedGain | None:
    """The model's throughput with an fp8 cache, at the concurrency twice the room holds."""
    model = facts.model
    if model is None or not about or model.deployment.kv_dtype is not KvDtype.BF16:
        return None
    fp8 = model.variant(kv_dtype=KvDtype.FP8)
    lv = about[-1]
    base = running or lv.batch
    if fp8 is None or base < 1:
        return None
    inp, out = round(lv.input_tokens), max(round(lv.output_tokens), 1)
    wider = float(round(min(lv.load, 2 * base)))
    before = model.total_tokens_per_s(round(base), inp, out)
    after = fp8.total_tokens_per_s(round(wider), inp, out)
    if before <= 0 or after <= before:
        return None
    factor = after / before
    return ExpectedGain(
        factor=fmt(factor),
        metric="total throughput",
        at=f"concurrency {wider:g}",
        source="model",
        text=f"an fp8 KV cache holds twice the requests: up to {factor:.1f}x at {wider:g} "
        "concurrent, per the model",
        low=1.0,
        high=fmt(factor),
    )
