"""The report's profile subsection, from the real H200 traces of a decode step
(tests/trace/data) written beside the committed H200 run: the top kernels, the busy
strip, per step."""

from __future__ import annotations

import shutil
from pathlib import Path

from servelab.report import write_report
from servelab.report.sections.profile import busy_strip
from servelab.store import RunDir
from servelab.trace import summarize_trace

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "trace" / "data"
RUN = REPO / "benchmarks" / "gpu" / "results" / "h200-diagnose" / "default"


def test_the_strip_shows_the_busy_share():
    assert busy_strip(0.25, width=8) == "██░░░░░░ 25% busy"
    assert busy_strip(0.0, width=4) == "░░░░ 0% busy"
    assert busy_strip(1.0, width=4) == "████ 100% busy"


def test_a_profiled_run_reports_its_top_kernels_and_busy_strip(tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    eager = summarize_trace(TRACES / "eager.pt.trace.json.gz", steps=10)
    RunDir(run).write_json("trace_summary.json", [eager.model_dump(mode="json", by_alias=True)])
    files = write_report([run], out=tmp_path / "report", targets=[], title=None)
    markdown = files.markdown.read_text()
    assert "Where the time goes (torch profile)" in markdown
    assert busy_strip(eager.busy_share) in markdown
    top = eager.top_ops[0]
    assert f"| {top.count:,} |" in markdown
    assert top.name[:40].replace("_", "\\_") in markdown
    assert "per step (10 steps)" in markdown
    html = files.html.read_text()
    assert "Where the time goes (torch profile)" in html and top.name[:40] in html


def test_a_run_without_a_profile_has_no_profile_section(tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    files = write_report([run], out=tmp_path / "report", targets=[], title=None)
    assert "Where the time goes (torch profile)" not in files.markdown.read_text()
