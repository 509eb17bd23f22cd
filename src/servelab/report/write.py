"""`servelab report`: read run directories, write report.html and report.md (+ PNG plots).

Each file is replaced atomically, so a report being rewritten is never seen half-done,
and written through RunDir, so no secret servelab was handed reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.core.errors import ConfigError
from servelab.report.html import render_html
from servelab.report.inputs import ReportRun, load_report_run
from servelab.report.markdown import PLOTS_DIR, render_markdown
from servelab.report.plots import render_png
from servelab.report.sections import build_report
from servelab.report.targets import Target
from servelab.store import REPORT_HTML_FILE, REPORT_MD_FILE, RunDir

__all__ = ["ReportFiles", "write_report", "write_run_report"]


@dataclass(frozen=True, slots=True)
class ReportFiles:
    html: Path
    markdown: Path
    plots: list[Path]


def write_report(
    run_dirs: Sequence[Path],
    *,
    out: Path | None = None,
    targets: Sequence[Target] = (),
    title: str | None = None,
) -> ReportFiles:
    """The report of the run in `run_dirs[0]`, written into `out` (default: that run)."""
    if not run_dirs:
        raise ConfigError("give at least one run directory")
    if len(run_dirs) > 1:
        raise ConfigError(
            "one run directory per report for now",
            hint="comparing runs side by side is the next step of servelab report",
        )
    run = load_report_run(run_dirs[0])
    return write_run_report(run, out=out or run.path, targets=targets, title=title)


def write_run_report(
    run: ReportRun, *, out: Path, targets: Sequence[Target] = (), title: str | None = None
) -> ReportFiles:
    """Render `run` into `out`: report.html, report.md and plots/<key>.png."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / PLOTS_DIR).mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write the report into {out}: {exc.strerror}") from None
    report = build_report(run, targets=targets, title=title)
    target = RunDir(out)
    text, plots = render_markdown(report)
    written = [
        target.write_bytes(f"{PLOTS_DIR}/{plot.key}.png", render_png(plot)) for plot in plots
    ]
    for stale in set((out / PLOTS_DIR).glob("*.png")) - set(written):
        stale.unlink()  # a plot the new report no longer draws
    markdown = target.write_text(REPORT_MD_FILE, text)
    html = target.write_text(REPORT_HTML_FILE, render_html(report))
    return ReportFiles(html=html, markdown=markdown, plots=written)
