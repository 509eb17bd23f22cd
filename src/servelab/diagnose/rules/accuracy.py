"""`accuracy_warning`: the engine said its output may be wrong, not only slow.

DeepGEMM fed scales of another format (SGLang converts them, which can cost accuracy on
Blackwell) or NaN in the logits. The log line is the evidence. Where the run was made
with `--quality`, the finding cites what the quality probe measured (quality.json): the
comparison with a reference run where there is one, since a numerics change that is the
same in every pass moves none of a run's own comparisons; else this run's own. Without
the probe it says that quality was not measured and how to measure it.
"""

from __future__ import annotations

from servelab.bench.quality.results import QualityComparison, QualityResult
from servelab.bench.quality.verdict import BOOTSTRAP_QUANTILE
from servelab.diagnose.actions import text_action
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import Action, Evidence, Finding, FindingKind, Severity, Tally
from servelab.diagnose.quality_evidence import comparison_evidence, moved
from servelab.engines.signatures import KIND_INFO, EventKind

__all__ = ["rule"]

_KINDS = {
    EventKind.DEEPGEMM_SCALE_FORMAT: Severity.WARNING,
    EventKind.NAN: Severity.CRITICAL,
}
_LOG_WEIGHT = 0.8
_QUALITY_WEIGHT = 1 - BOOTSTRAP_QUANTILE
"""Where the outputs moved, the probe is a second, independent source, as sure as its
verdict (a one-sided 97.5% bootstrap statement); that the warned-of step moved them is
the log's part."""
_WORST = {"broken": 0, "drift": 1, "within_floor": 2}
_MEASURE = (
    "measure output quality: servelab bench --quality (or servelab run --quality), with "
    "--quality-ref RUN, RUN a run of the same model without the warning"
)
_REFERENCE = (
    "compare with a reference: servelab bench --quality --quality-ref RUN, RUN a run of the "
    "same model without the warning (another kernel or checkpoint)"
)


def rule(facts: RunFacts) -> list[Finding]:
    findings = []
    for kind, severity in _KINDS.items():
        events = facts.events_of(kind)
        if not events:
            continue
        tally = Tally()
        tally.add(
            "log",
            _LOG_WEIGHT,
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
        warned = f"the engine warns about its output: {kind.value.replace('_', ' ')}"
        actions = [text_action(info.advice)]
        quality = facts.quality
        cited = _cited(quality) if quality is not None else None
        if quality is None or cited is None:
            why = "the run was made without --quality" if quality is None else "no comparison"
            findings.append(
                Finding(
                    kind=FindingKind.ACCURACY_WARNING,
                    title=warned,
                    severity=severity,
                    confidence=tally.confidence,
                    evidence=tally.evidence,
                    explanation=info.meaning,
                    actions=[*actions, text_action(_MEASURE)],
                    missing=[f"output quality was not measured ({why})"],
                )
            )
            continue
        findings.append(_measured(warned, severity, info.meaning, actions, tally, quality, cited))
    return findings


def _cited(quality: QualityResult) -> QualityComparison | None:
    """The comparison against a reference run, else the worst of the run's own."""
    reference = [c for c in quality.comparisons if c.kind == "configuration"]
    candidates = reference or quality.comparisons
    return min(candidates, key=lambda c: _WORST[c.verdict], default=None)


def _measured(
    warned: str,
    severity: Severity,
    meaning: str,
    actions: list[Action],
    tally: Tally,
    quality: QualityResult,
    cited: QualityComparison,
) -> Finding:
    """The warning with what the probe measured: the outputs moved by X, or did not."""
    evidence = comparison_evidence(cited)
    missing: list[str] = []
    if cited.verdict == "within_floor":
        for item in evidence:
            tally.note(item.model_copy(update={"supports": False}))
    else:
        tally.add("quality probe", _QUALITY_WEIGHT, evidence)
    if cited.verdict == "broken":
        severity = Severity.CRITICAL
    elif cited.kind == "configuration" and cited.verdict == "within_floor":
        severity = Severity.INFO
    if cited.kind != "configuration":
        missing.append(
            "no reference run (--quality-ref): a numerics change that is the same in every "
            "pass moves none of this run's own comparisons"
        )
        actions = [*actions, text_action(_REFERENCE)]
    against = (
        f"against the reference run {quality.reference_run or cited.reference}"
        if cited.kind == "configuration"
        else f"in the {cited.kind.replace('_', ' ')} comparison"
    )
    return Finding(
        kind=FindingKind.ACCURACY_WARNING,
        title=f"{warned}, and {against}, {moved(cited)}",
        severity=severity,
        confidence=tally.confidence,
        evidence=tally.evidence,
        explanation=f"{meaning} The quality probe: {cited.reason}.",
        actions=actions,
        missing=missing,
    )
