"""The report's six sections, built once from the run directories as plain content, and
after the results a twin's (twin.json) and a quality probe's (quality.json) where the run
has them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from servelab import __version__
from servelab.report.document import Report, Section
from servelab.report.inputs import ReportRun
from servelab.report.sections.engine import engine_section
from servelab.report.sections.findings import findings_section
from servelab.report.sections.goal import goal_section
from servelab.report.sections.headline import headline
from servelab.report.sections.machine import machine_section
from servelab.report.sections.quality import quality_section
from servelab.report.sections.results import results_section
from servelab.report.sections.status import status_section
from servelab.report.sections.twin import twin_section
from servelab.report.targets import Target

__all__ = ["build_report"]


def build_report(
    run: ReportRun, *, targets: Sequence[Target] = (), title: str | None = None
) -> Report:
    """The state of the union of one run."""
    info = run.summary.run
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    return Report(
        title=title or f"servelab report: {info.name}",
        subtitle=f"Run started {info.started_utc} · status {run.summary.status} · "
        f"servelab {info.servelab_version}" + (f" ({info.git_sha[:12]})" if info.git_sha else ""),
        sections=[
            goal_section(run, targets),
            machine_section(run),
            engine_section(run),
            results_section(run),
            *_present(twin_section(run.twin, run.summary.levels)),
            *_present(quality_section(run)),
            findings_section(run),
            status_section(run, targets),
        ],
        generator=f"servelab {__version__}, {stamp}",
        headline=headline(run, targets),
    )


def _present(section: Section | None) -> list[Section]:
    return [] if section is None else [section]
