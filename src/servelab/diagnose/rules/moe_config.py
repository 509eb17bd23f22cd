"""`moe_config_missing`: the fused MoE kernel runs on default tiles for this shape and GPU.

SGLang and vLLM look for a tuned config file per expert shape, GPU and dtype; without one
they say so in the log and fall back to defaults that can leave most of the GPU idle on
decode. The log line is the evidence (with the file it looked for); a MoE model and an
engine slower than the model support it. How much it costs is a kernel's question the
model cannot answer (it has no per-kernel term): the finding gives no expected gain.
"""

from __future__ import annotations

from servelab.diagnose.actions import flag_name_action, text_action
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import Evidence, Finding, FindingKind, Severity, Tally
from servelab.diagnose.signals import fmt
from servelab.engines.signatures import KIND_INFO, EventKind, LogEvent

__all__ = ["rule"]

_WEIGHTS = {"log": 0.8, "fallback": 0.5, "model": 0.2, "gap": 0.2}
_FIELDS = ("config_file", "experts", "n", "device_name", "dtype", "triton_version")
_GAP_RATIO = 1.5
"""The engine well above the model's TPOT somewhere: the default tiles may be why."""


def rule(facts: RunFacts) -> list[Finding]:
    missing = facts.events_of(EventKind.MOE_CONFIG_MISSING)
    fallback = facts.events_of(EventKind.MOE_CONFIG_FALLBACK)
    if not missing and not fallback:
        return []
    tally = Tally()
    tally.add("log", _WEIGHTS["log"], [_event(e) for e in missing])
    tally.add("fallback", _WEIGHTS["fallback"], [_event(e) for e in fallback])
    model = facts.model
    if model is not None and model.deployment.model.experts:
        tally.add(
            "model",
            _WEIGHTS["model"],
            [
                Evidence(
                    what="routed experts per MoE layer",
                    value=model.deployment.model.experts,
                    source="model: config",
                )
            ],
        )
    slow = [lv for lv in facts.measured if lv.ratio is not None and lv.ratio >= _GAP_RATIO]
    if slow:
        worst = max(slow, key=lambda lv: lv.ratio or 0.0)
        tally.add(
            "gap",
            _WEIGHTS["gap"],
            [
                Evidence(
                    what=f"measured / model TPOT at {worst.label}",
                    value=fmt(worst.ratio or 0.0),
                    unit="x",
                    source=worst.source,
                )
            ],
        )
    info = KIND_INFO[EventKind.MOE_CONFIG_MISSING if missing else EventKind.MOE_CONFIG_FALLBACK]
    first = (missing or fallback)[0]
    what = "no tuned MoE kernel config" if missing else "a MoE kernel config for another case"
    return [
        Finding(
            kind=FindingKind.MOE_CONFIG_MISSING,
            title=f"{what} ({first.fields.get('config_file', 'see engine.log')})",
            severity=Severity.WARNING,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=info.meaning,
            actions=[
                text_action(info.advice),
                flag_name_action(facts.engine, "moe_backend", "or try another MoE kernel backend"),
            ],
            missing=[
                "the kernel floor (replayed kernels) is not measured yet: the cost of the "
                "default tiles cannot be stated"
            ],
            impact=0.0,
        )
    ]


def _event(event: LogEvent) -> Evidence:
    details = ", ".join(f"{k}={event.fields[k]}" for k in _FIELDS if k in event.fields)
    return Evidence(
        what=f"{event.kind.value} ({event.engine}, x{event.count})",
        value=details or event.text[:200],
        source=f"engine.log line {event.line_no}",
    )
