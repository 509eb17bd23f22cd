"""`diagnose_run`: a run directory in, a `Diagnosis` out (and written as diagnosis.json).

The rules run on the run's facts; findings on levels the client could not drive are
marked less certain; the findings are ordered worst first: severity, then how much of the
time each accounts for times how sure it is, then confidence.
"""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose.check import check_applied_all
from servelab.diagnose.collect import collect_facts
from servelab.diagnose.deployment import launched_spec
from servelab.diagnose.document import CeilingPoint, ConfiguredSetting, Diagnosis, SourceStatus
from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import Finding, FindingKind, Severity
from servelab.diagnose.inputs import load_run
from servelab.diagnose.layers import gap_layers
from servelab.diagnose.options import DiagnoseOptions
from servelab.diagnose.rules import RULES
from servelab.diagnose.twin_rank import rank_by_replay
from servelab.diagnose.twin_run import run_twin
from servelab.store import DIAGNOSIS_FILE, SUMMARY_FILE, TWIN_FILE, RunDir

__all__ = ["CLIENT_BOUND_DISCOUNT", "DIAGNOSIS_FILE", "configuration", "diagnose_run", "rank"]

CLIENT_BOUND_DISCOUNT = 0.5
"""A finding about levels the client could not drive is half as certain."""

_SOURCES = {
    "gpu": "GPU telemetry",
    "metrics": "engine metrics",
    "log": "engine log",
    "probe": "probe",
    "model": "model",
    "quality": "quality probe",
}


def diagnose_run(
    path: Path | str, options: DiagnoseOptions | None = None, *, write: bool = True
) -> Diagnosis:
    """Diagnose the run in `path`; with `write`, diagnosis.json goes into it."""
    options = options or DiagnoseOptions()
    run_dir = Path(path)
    files = load_run(run_dir, engine=options.engine, probe=options.probe)
    facts = collect_facts(files, options)
    findings = _discount([f for rule in RULES for f in rule(facts)])
    twin, twin_detail = run_twin(files, facts.engine, facts.model)
    notes = list(facts.notes)
    if twin is not None:
        findings, replay_notes = rank_by_replay(findings, twin, facts)
        notes += replay_notes
    findings = rank(findings)
    sources = _sources(facts, files.events_source, files.probe_source, files.quality_source)
    sources["twin"] = SourceStatus(available=twin is not None, detail=twin_detail)
    applies = facts.summary.run.applies
    checks = check_applied_all(applies, run_dir) if applies else []
    diagnosis = Diagnosis(
        run_dir=str(run_dir),
        run_name=facts.summary.run.name,
        engine=facts.engine.name,
        deployment=facts.model.label if facts.model is not None else None,
        time_scale=options.time_scale,
        knee=facts.knee,
        findings=findings,
        layers=gap_layers(facts),
        ceiling=_ceiling(facts),
        sources=sources,
        notes=notes,
        configuration=configuration(facts),
        prediction=checks[0] if checks else None,
        predictions=checks,
    )
    if write:
        run = RunDir(run_dir)
        if twin is not None:
            run.write_json(TWIN_FILE, twin.result)
        run.write_diagnosis(diagnosis)
    return diagnosis


def _ceiling(facts: RunFacts) -> list[CeilingPoint]:
    """The model's total tok/s at each closed-loop level, for the report's throughput plot."""
    if facts.model is None:
        return []
    points = []
    for lv in facts.levels:
        c = lv.summary.max_concurrency
        if c is None or lv.summary.completed == 0 or lv.summary.total_throughput is None:
            continue
        inp, out = round(lv.input_tokens), max(round(lv.output_tokens), 1)
        points.append(
            CeilingPoint(
                concurrency=c,
                total_tok_s=facts.model.total_tokens_per_s(c, inp, out),
                measured_total_tok_s=lv.summary.total_throughput,
            )
        )
    return points


def rank(findings: list[Finding]) -> list[Finding]:
    """Worst first: severity, then whether the user can act on it here (`_reach`), then
    impact x confidence, then confidence, then kind."""
    order = list(FindingKind)
    return sorted(
        findings,
        key=lambda f: (
            f.severity.rank,
            _reach(f),
            -f.impact * f.confidence,
            -f.confidence,
            order.index(f.kind),
        ),
    )


def _reach(finding: Finding) -> int:
    """0: an action on a known setting (or only text actions, or none); 1: its available
    setting actions all rest on a setting the run does not show ("if CUDA graphs are off");
    2: every action lacks a setting on this engine."""
    actions = finding.actions
    if not actions:
        return 0
    if not any(action.available for action in actions):
        return 2
    settings = [a for a in actions if a.knob is not None and a.available]
    return 1 if settings and all(a.conditional for a in settings) else 0


def _discount(findings: list[Finding]) -> list[Finding]:
    """Other findings resting on client-limited levels lose half their confidence (a
    client whose lag only blurred its timestamps, an info finding, leaves them alone)."""
    bound = {
        level
        for f in findings
        if f.kind is FindingKind.CLIENT_BOUND and f.severity is not Severity.INFO
        for level in f.levels
    }
    out = []
    for finding in findings:
        hit = sorted(bound & set(finding.levels))
        if finding.kind is FindingKind.CLIENT_BOUND or not hit:
            out.append(finding)
            continue
        out.append(
            finding.model_copy(
                update={
                    "confidence": round(finding.confidence * CLIENT_BOUND_DISCOUNT, 3),
                    "missing": [
                        *finding.missing,
                        f"level(s) {', '.join(map(str, hit))} were client-bound",
                    ],
                }
            )
        )
    return out


def _sources(facts: RunFacts, events: str, probe: str, quality: str) -> dict[str, SourceStatus]:
    status = {"summary": SourceStatus(available=True, detail=SUMMARY_FILE)}
    present = {
        "gpu": "summary.json levels' telemetry.gpu",
        "metrics": "summary.json levels' telemetry.engine, metrics.jsonl",
        "log": events,
        "probe": probe,
        "model": facts.model_detail,
        "quality": quality,
    }
    for key, name in _SOURCES.items():
        why = facts.missing.get(key)
        status[name] = SourceStatus(available=why is None, detail=why or present[key])
    return status


def configuration(facts: RunFacts) -> list[ConfiguredSetting]:
    """The spec's knobs first (what the user asked for), then what the command and the
    engine's log say was in force, each named once, with its source."""
    found: list[ConfiguredSetting] = []
    knobs = (launched_spec(facts.summary) or {}).get("knobs")
    for name, value in (knobs if isinstance(knobs, dict) else {}).items():
        if value is not None:
            found.append(
                ConfiguredSetting(name=name, value=_plain(value), source="engine spec knobs")
            )
    for name, setting in facts.engine.resolved.items():
        found.append(
            ConfiguredSetting(name=name, value=_plain(setting.value), source=setting.source)
        )
    return found


def _plain(value: object) -> float | int | str | bool | None:
    return value if isinstance(value, int | float | str | bool) else str(value)
