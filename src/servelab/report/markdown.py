"""report.md: the run's state of the union, as Markdown."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from servelab.bench.knee import Knee
from servelab.bench.results import BenchSummary
from servelab.core.severity import Severity
from servelab.diagnose import Diagnosis
from servelab.engines.signatures import KIND_INFO, LogScan
from servelab.probe.report import ProbeReport
from servelab.report.diagnosis import render_diagnosis_markdown
from servelab.report.tables import sweep_header, sweep_rows
from servelab.report.verdicts import verdict_markdown
from servelab.store import ENGINE_EVENTS_FILE, ENGINE_LOG_FILE, PROBE_FILE

__all__ = ["render_run_report"]


def render_run_report(
    summary: BenchSummary,
    *,
    knee: Knee,
    engine_command: Sequence[str] | None,
    probe: ProbeReport | None = None,
    engine_log: LogScan | None = None,
    gpu_memory: tuple[bool | None, str] | None = None,
    diagnosis: Diagnosis | None = None,
    title: str = "servelab run",
) -> str:
    """The Markdown report of a sweep: table, knee, machine verdicts, engine command, machine."""
    run = summary.run
    header = sweep_header(summary.levels)
    lines = [
        f"# {title}: {run.name}",
        "",
        f"Started {run.started_utc} · status **{summary.status}** · "
        f"servelab {run.servelab_version}" + (f" ({run.git_sha[:12]})" if run.git_sha else ""),
        "",
        "## Target",
        "",
        f"- endpoint: `{run.target.get('url')}` ({run.target.get('api')} API, "
        f"model `{run.target.get('model')}`, engine {run.target.get('engine')})",
        f"- workload: {_workload(run.workload)}",
        "",
        "## Sweep",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in sweep_rows(summary.levels)]
    if any(s.client.client_bound for s in summary.levels):
        lines += ["", "`*` client-bound: the load generator's lag or CPU may have limited it."]
    if summary.failure or (engine_log is not None and engine_log.exit is not None):
        lines += ["", "## What happened", "", *_failure_lines(summary, engine_log)]
    lines += ["", "## Knee", "", knee.explanation[0].upper() + knee.explanation[1:] + "."]
    notes = list(run.notes) + [n for s in summary.levels for n in s.notes]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in dict.fromkeys(notes)]
    if probe is not None:
        lines += ["", "## Machine verdicts", "", *_verdict_lines(probe)]
    if diagnosis is not None:
        lines += ["", "## Findings", "", render_diagnosis_markdown(diagnosis).rstrip()]
    if engine_log is not None:
        lines += ["", "## Engine log", "", *_engine_log_lines(engine_log)]
    if gpu_memory is not None and gpu_memory[0] is not None:
        released = "released" if gpu_memory[0] else "**not released**"
        lines += ["", f"GPU memory after the engine stopped: {released} ({gpu_memory[1]})."]
    if engine_command:
        lines += ["", "## Engine command", "", "```", shlex.join(engine_command), "```"]
    lines += ["", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in run.host.items()]
    lines += [f"- {key} {value}" for key, value in run.versions.items()]
    return "\n".join(lines) + "\n"


def _failure_lines(summary: BenchSummary, engine_log: LogScan | None) -> list[str]:
    """Why the run stopped early: the failure, and the engine's exit with its last words."""
    lines = [f"The run failed: {summary.failure}."] if summary.failure else []
    died = engine_log.exit if engine_log is not None else None
    if died is not None:
        lines += [
            f"The engine exited during {died.during} with {died.description}; the levels "
            "before it are kept, later levels were not run. Its last log lines:",
            "",
            "```",
            *died.log_tail,
            "```",
        ]
    return lines


def _workload(workload: dict) -> str:
    parts = [str(workload.get("dataset"))]
    if workload.get("input_len") is not None:
        parts.append(f"{workload['input_len']} input tokens")
    if workload.get("output_len") is not None:
        parts.append(f"{workload['output_len']} output tokens")
    parts.append(f"input lengths by {workload.get('input_len_method')}")
    return ", ".join(parts)


def _verdict_lines(probe: ProbeReport) -> list[str]:
    """Each verdict as one bullet with its evidence; the full facts are in probe.json."""
    return [
        f"From `{PROBE_FILE}` ({probe.virtualization.summary}):",
        "",
        *verdict_markdown(probe.verdicts),
    ]


def _engine_log_lines(scan: LogScan) -> list[str]:
    """The known signatures its log matched, worst first, each with what to try."""
    if not scan.events:
        return [f"No known signature in {scan.lines:,} lines of `{ENGINE_LOG_FILE}`."]
    source = f"`{ENGINE_LOG_FILE}` (`{ENGINE_EVENTS_FILE}`)"
    lines = [f"From {scan.lines:,} lines of {source}:", ""]
    for event in sorted(scan.events, key=lambda e: (e.severity.rank, e.line_no)):
        repeated = f" (x{event.count})" if event.count > 1 else ""
        lines.append(f"- **{event.severity.value}** `{event.kind.value}`{repeated}: {event.text}")
        if event.severity is not Severity.INFO:
            lines.append(f"  - try: {KIND_INFO[event.kind].advice}")
    return lines
