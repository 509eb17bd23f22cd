"""`settings_contradict_machine`: the launch's NCCL variables or layout against the probe.

The run records the spec it launched (summary.json) and, with `run`, the machine's
probe.json: `engines.machine_check` reads one against the other, and each contradiction
it finds becomes a finding with the probe's facts as evidence. A run attached by URL has
no spec, and one without probe.json no machine: the rule then says nothing. Its actions
change the spec (an NCCL variable, CUDA_VISIBLE_DEVICES, the layout), not the machine.
"""

from __future__ import annotations

from typing import Any

import yaml

from servelab.core.errors import ConfigError
from servelab.diagnose.actions import text_action
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import ActionTarget, Evidence, Finding, FindingKind
from servelab.engines.machine_check import machine_verdicts
from servelab.engines.spec import parse_spec
from servelab.probe.verdict import Severity

__all__ = ["rule"]

_CONFIDENCE = 0.9
"""Both sides are read, not inferred: the spec as launched, the machine as probed."""


def rule(facts: RunFacts) -> list[Finding]:
    if facts.probe is None or facts.summary.engine is None:
        return []
    text = facts.summary.engine.get("spec")
    if not isinstance(text, str):
        return []
    try:
        data: Any = yaml.safe_load(text)
        spec = parse_spec(data, source="summary.json engine.spec")
    except (yaml.YAMLError, ConfigError, TypeError):
        return []
    verdicts = machine_verdicts(spec, spec.env, facts.probe.document, source=facts.probe.source)
    return [
        Finding(
            kind=FindingKind.SETTINGS_CONTRADICT_MACHINE,
            title=verdict.title,
            severity=verdict.severity if verdict.severity is not Severity.OK else Severity.INFO,
            confidence=_CONFIDENCE,
            evidence=[_evidence(line, verdict.code) for line in verdict.evidence],
            explanation=verdict.meaning,
            actions=[text_action(verdict.action, ActionTarget.ENGINE)],
        )
        for verdict in verdicts
    ]


def _evidence(line: str, code: str) -> Evidence:
    """'NCCL_P2P_LEVEL=5 (in the spec): NCCL reads it as SYS' as what and value."""
    what, sep, value = line.partition(": ")
    if not sep:
        what, value = "seen", line
    return Evidence(what=what, value=value, source=f"{code}: the spec against the probe")
