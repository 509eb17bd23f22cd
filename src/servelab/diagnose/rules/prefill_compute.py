"""`prefill_compute`: reading the prompt is a large part of every request's time.

At the lightest load a request's TTFT is its prefill (nothing queues before it), so
TTFT / E2E there is the share of its life spent on the prompt. A prefill of many tokens is
bound by FLOPs, not bytes: what it costs is the GPU's matrix rate. What shows it:

- the sweep: TTFT a large share of E2E at the lightest load, prompts long next to outputs;
- the model: prefill compute-bound at this prompt length, and the measured TTFT near (or
  far above) the model's prefill time.

Long TTFTs under load are queueing, not prefill: only the lightest level is read, and only
when nothing waited there (one stream, or the engine's own queue empty).
"""

from __future__ import annotations

from servelab.diagnose.actions import knob_action, text_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import Action, Evidence, Finding, FindingKind, Severity, Tally
from servelab.diagnose.signals import fmt

__all__ = ["PREFILL_SHARE", "PREFILL_WARNING_SHARE", "PROMPT_HEAVY", "rule"]

PREFILL_SHARE = 0.3
"""TTFT at least 30% of E2E at the lightest load: the prompt is a material part."""
PREFILL_WARNING_SHARE = 0.5
"""More than half of every request is its prefill."""
PROMPT_HEAVY = 0.8
"""Prompt tokens 80% or more of a request's tokens: a prompt-heavy workload."""
SLOW_PREFILL_RATIO = 3.0
"""Measured TTFT this many times the model's prefill: the prefill itself is slow."""

_WEIGHTS = {"sweep": 0.5, "workload": 0.2, "model": 0.3}


def rule(facts: RunFacts) -> list[Finding]:
    levels = facts.closed or facts.measured
    if not levels:
        return []
    low = levels[0]
    ttft, e2e = low.summary.mean_ttft_ms, low.summary.mean_e2e_latency_ms
    if ttft is None or not e2e or not _unqueued(low):
        return []
    share = ttft / e2e
    if share < PREFILL_SHARE:
        return []
    tally = Tally()
    tally.add(
        "sweep",
        _WEIGHTS["sweep"],
        [
            Evidence(
                what=f"TTFT / E2E at {low.label}",
                value=fmt(100 * share),
                unit="%",
                source=low.source,
            )
        ],
    )
    prompt_share = low.input_tokens / max(low.tokens_per_request, 1.0)
    if prompt_share >= PROMPT_HEAVY:
        tally.add(
            "workload",
            _WEIGHTS["workload"],
            [
                Evidence(
                    what="prompt share of a request's tokens",
                    value=fmt(100 * prompt_share),
                    unit="%",
                    source=low.source,
                )
            ],
        )
    slow = _model(facts, low, ttft, tally)
    severity = Severity.WARNING if share >= PREFILL_WARNING_SHARE else Severity.INFO
    return [
        Finding(
            kind=FindingKind.PREFILL_COMPUTE,
            title=f"prefill is {share:.0%} of each request at {low.label}",
            severity=severity,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=(
                "Before its first token a request's whole prompt passes through the model; "
                "for long prompts that is matrix work bound by the GPU's FLOPs, and it is a "
                "large part of each request's time here."
                + (
                    " The measured prefill is also well above the model's, so the engine "
                    "prefills slowly (small prefill chunks, an attention kernel without "
                    "flash attention)."
                    if slow
                    else ""
                )
            ),
            actions=_actions(facts),
            missing=[f"model: {facts.missing['model']}"] if facts.missing.get("model") else [],
            levels=[low.level],
            impact=share,
        )
    ]


def _unqueued(lv: LevelFacts) -> bool:
    """A level whose TTFT is prefill, not a wait: one stream, or the engine's queue empty,
    and the client's own timestamps not blurred by its lag."""
    if lv.summary.client is not None and lv.summary.client.client_bound:
        return False
    if lv.closed and lv.load == 1:
        return True
    return lv.engine is not None and (lv.engine.queued_max or 0.0) < 1


def _model(facts: RunFacts, low: LevelFacts, ttft: float, tally: Tally) -> bool:
    """Add the model's view of the prefill; True when the measured one is much slower."""
    if facts.model is None:
        return False
    prefill = facts.model.prefill(low.input_tokens)
    prefill_ms = facts.model.prefill_ms(low.input_tokens)
    ratio = ttft / prefill_ms if prefill_ms else None
    found = [
        Evidence(
            what=f"the model's prefill of {low.input_tokens:,.0f} tokens ({prefill.bound}-bound)",
            value=fmt(prefill_ms),
            unit="ms",
            source="model: prefill",
            supports=prefill.bound == "compute",
        )
    ]
    if ratio is not None:
        found.append(
            Evidence(
                what="measured TTFT / model prefill", value=fmt(ratio), unit="x", source=low.source
            )
        )
    if prefill.bound == "compute":
        tally.add("model", _WEIGHTS["model"], found)
    else:
        for evidence in found:
            tally.note(evidence)
    return ratio is not None and ratio >= SLOW_PREFILL_RATIO


def _actions(facts: RunFacts) -> list[Action]:
    actions = [
        knob_action(facts.engine, "quantization", "fp8", "a faster matrix rate: fp8 weights")
    ]
    actions.append(
        text_action(
            "for prompt-heavy traffic, separate prefill from decode (disaggregated serving) "
            "so long prompts do not stall running requests"
        )
    )
    return actions
