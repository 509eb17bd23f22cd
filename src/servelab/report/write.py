"""`servelab report`: read run directories, write report.html and report.md (+ PNG plots).

Each file is replaced atomically, so a report being rewritten is never seen half-done,
and written through RunDir, so no secret servelab was handed reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servelab.bench.cost_results import HourlyPrice
from servelab.core.errors import ConfigError
from servelab.report.compare import build_comparison
from servelab.report.document import Report
from servelab.report.html import render_html
from servelab.report.inputs import ReportRun, load_report_run
from servelab.report.markdown import PLOTS_DIR, render_markdown
from servelab.report.plots import render_png
from servelab.report.sections import build_report
from servelab.report.targets import Target
from servelab.store import REPORT_HTML_FILE, REPORT_MD_FILE, RunDir

__all__ = ["ReportFiles", "write_document", "write_report", "write_run_report"]


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
    price: HourlyPrice | None = None,
) -> ReportFiles:
    """The report of one run, written into `out` (default: that run), or of several
    compared with the first (default: a folder beside the first, `compare-A-vs-B`);
    `price` prices every run's tokens in place of its own price."""
    if not run_dirs:
        raise ConfigError("give at least one run directory")
    runs = [load_report_run(path, price=price) for path in run_dirs]
    if len(runs) == 1:
        return write_run_report(runs[0], out=out or runs[0].path, targets=targets, title=title)
    if len({path.resolve() for path in run_dirs}) < len(run_dirs):
        raise ConfigError("a run directory is given twice: compare different runs")
    folder = out or runs[0].path.parent / (
        "compare-" + "-vs-".join(p.resolve().name for p in run_dirs)
    )
    return write_document(build_comparison(runs, targets=targets, title=title), folder)


def write_run_report(
    run: ReportRun, *, out: Path, targets: Sequence[Target] = (), title: str | None = None
) -> ReportFiles:
    """Render `run` into `out`: report.html, report.md and plots/<key>.png."""
    return write_document(build_report(run, targets=targets, title=title), out)


def write_document(report: Report, out: Path) -> ReportFiles:
    """Render a built report into `out` (a run's, a comparison's or a study's)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / PLOTS_DIR).mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write the report into {out}: {exc.strerror}") from None
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
