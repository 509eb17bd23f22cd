"""The twin in the report: twin.json read from the run, shown as 'Replayed against
measured' in report.md and report.html (levels, terms, limits, plot), absent without it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servelab.report import write_report
from servelab.report.document import Figure, Paragraph, Table
from servelab.report.inputs import load_report_run
from servelab.report.plots import Interval, render_png, render_svg, twin_plot
from servelab.report.sections import build_report
from servelab.report.sections.twin import twin_section
from servelab.twin.result import (
    MetricPair,
    TwinFit,
    TwinLevel,
    TwinLimit,
    TwinPolicy,
    TwinResult,
    TwinTerm,
)
from tests.diagnose.builders import write_run
from tests.report.builders import bench_summary, blocks, report_run, sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TITLE = "Replayed against measured"


def pair(measured: float, replayed: float, low: float, high: float) -> MetricPair:
    return MetricPair(
        measured=measured, replayed=replayed, low=low, high=high, error=replayed / measured - 1
    )


def twin_level(
    index: int, concurrency: int, ttft: tuple[float, ...], tpot: tuple[float, ...], out: float
) -> TwinLevel:
    """A level of sweep(): TTFT and TPOT as (measured, replayed, low, high), output tok/s
    replayed 5% under `out`."""
    return TwinLevel(
        level=index,
        load=f"concurrency {concurrency}",
        requests=32,
        metrics={
            "median_ttft_ms": pair(*ttft),
            "p90_ttft_ms": pair(*ttft),
            "median_tpot_ms": pair(*tpot),
            "p90_tpot_ms": pair(*tpot),
            "output_throughput": pair(out, out * 0.95, out * 0.9, out),
            "total_throughput": pair(2 * out, 2 * out * 0.95, 2 * out * 0.9, 2 * out),
        },
        explained_share=0.93,
        decode_batch_measured=float(concurrency) * 0.9,
        decode_batch_replayed=float(concurrency) * 0.85,
        engine_running_mean=float(concurrency),
        preemptions=index,
    )


def term(name: str, unit: str, value: float, stderr: float | None = None) -> TwinTerm:
    spread = stderr or 0.0
    return TwinTerm(
        name=name,
        unit=unit,
        value=value,
        stderr=stderr,
        low=None if stderr is None else value - 1.645 * spread,
        high=None if stderr is None else value + 1.645 * spread,
    )


def twin(**fit: object) -> TwinResult:
    """Three of sweep()'s four levels (concurrency 1, 8, 32), fitted from requests."""
    return TwinResult(
        schema="servelab.twin/1",
        engine="sglang",
        policy=TwinPolicy(
            name="sglang",
            running_reserve=0.7,
            admit_reserve=1.0,
            reserve_floor=0.098,
            admit_headroom=0.0,
            decodes_in_budget=False,
            victim="newest",
            requeue_front=True,
        ),
        limits=[
            TwinLimit(name="running_cap", value=48, source="command line --max-running-requests"),
            TwinLimit(name="kv_capacity_tokens", value=123456, source="server log"),
            TwinLimit(name="batch_tokens", value=None, source="not known: no limit replayed"),
        ],
        terms=[
            term("base", "ms per step", 6.25, 0.125),
            term("per_seq", "ms per decoding request", 0.0412, 0.002),
            term("per_context_token", "ms per context token", 2.1e-05),
        ],
        request_overhead_ms=term("request_overhead", "ms per request, send to scheduler", 3.5),
        fit=TwinFit(
            source="requests",
            samples=12345,
            requests=96,
            residual_ms=0.8,
            rounds=3,
            converged=True,
            resamples=48,
        ).model_copy(update=fit),
        levels=[
            twin_level(0, 1, (20, 21, 19, 23), (10, 10.4, 9.8, 11), 95),
            twin_level(1, 8, (200, 212, 190, 230), (15, 14.1, 13.5, 15.2), 650),
            twin_level(2, 32, (900, 1260, 1100, 1400), (30, 31.5, 29, 33), 1100),
        ],
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory with summary.json and twin.json."""
    folder = write_run(tmp_path / "run", bench_summary())
    (folder / "twin.json").write_text(twin().model_dump_json(by_alias=True))
    return folder


@pytest.fixture
def written(run_dir: Path) -> tuple[Path, str, str]:
    files = write_report([run_dir])
    return run_dir, files.markdown.read_text(), files.html.read_text()


def markdown_section(markdown: str) -> str:
    """report.md from the twin's heading to the next section's."""
    start = markdown.index(f"## 5. {TITLE}")
    return markdown[start : markdown.index("\n## 6. ", start)]


def test_twin_json_is_read_with_the_run_and_placed_after_the_results(run_dir: Path):
    run = load_report_run(run_dir)
    assert run.twin == twin()
    assert run.notes == []
    keys = [s.key for s in build_report(run).sections]
    assert keys == ["targets", "machine", "engine", "results", "twin", "findings", "status"]


def test_the_section_says_what_the_twin_is_and_how_it_was_fitted():
    section = twin_section(twin(), sweep())
    assert section is not None and section.title == TITLE
    first = blocks(section, Paragraph)[0].text
    assert first.startswith(
        "The twin is the engine's step cost fitted from this run's own records, replayed "
        "level by level in virtual time under the limits it ran with. "
    )
    assert "fitted from 12,345 gaps of 96 requests, residual 0.8 ms" in first
    assert "converged in 3 rounds of fitting and replaying" in first


def test_a_fit_from_level_summaries_that_did_not_settle_says_so():
    section = twin_section(
        twin(source="level summaries", samples=4, requests=128, rounds=6, converged=False),
        sweep(),
    )
    assert section is not None
    first = blocks(section, Paragraph)[0].text
    assert "fitted from 4 level summaries (128 requests; no requests.jsonl)" in first
    assert "did not converge in 6 rounds" in first


def test_the_levels_table_shows_measured_replayed_interval_and_signed_error():
    section = twin_section(twin(), sweep())
    assert section is not None
    levels = blocks(section, Table)[0]
    assert levels.header[0] == "load" and levels.header[-1] == "explained"
    assert levels.header[1::3][:4] == ["TTFT p50 ms", "TPOT p50 ms", "E2E p50 ms", "output tok/s"]
    assert [row[0] for row in levels.rows] == ["concurrency 1", "concurrency 8", "concurrency 32"]
    at8 = levels.rows[1]
    assert at8[1:4] == ["200", "212 (190–230)", "+6.0%"]  # TTFT
    assert at8[4:7] == ["15.0", "14.1 (13.5–15.2)", "-6.0%"]  # TPOT
    assert at8[7:10] == ["-", "-", "-"]  # E2E: not in this twin
    assert at8[10:13] == ["650", "618 (585–650)", "-5.0%"]  # output tok/s
    assert levels.rows[0][4:7] == ["10.0", "10.4 (9.80–11.0)", "+4.0%"]  # under 10 ms: 3 figures
    assert at8[13] == "93%"
    # TTFT at 32 is replayed 40% over: the one cell marked
    assert levels.rows[2][3] == "+40.0%"
    assert levels.bad == frozenset({(2, 3)})


def test_an_error_that_rounds_to_nothing_has_no_sign():
    level = twin_level(0, 1, (20, 19.999, 19, 21), (10, 10.004, 9.9, 10.1), 95)
    section = twin_section(twin().model_copy(update={"levels": [level]}), sweep())
    assert section is not None
    row = blocks(section, Table)[0].rows[0]
    assert (row[3], row[6]) == ("0.0%", "0.0%")


def test_the_terms_and_limits_tables_show_values_errors_and_sources():
    section = twin_section(twin(), sweep())
    assert section is not None
    tables = {t.header[0]: t for t in blocks(section, Table)}
    terms = tables["term"]
    assert terms.header == ["term", "value", "± stderr", "90% interval", "unit"]
    assert terms.rows[0] == ["base", "6.25", "± 0.125", "6.04–6.46", "ms per step"]
    assert terms.rows[2] == ["per_context_token", "2.1e-05", "-", "-", "ms per context token"]
    assert terms.rows[-1] == [
        "request_overhead",
        "3.5",
        "-",
        "-",
        "ms per request, send to scheduler",
    ]
    limits = tables["limit"]
    assert limits.rows == [
        ["running_cap", "48", "command line --max-running-requests"],
        ["kv_capacity_tokens", "123,456", "server log"],
        ["batch_tokens", "not replayed", "not known: no limit replayed"],
    ]
    assert limits.tones == ["plain", "plain", "warn"]
    assert "sglang policy" in (limits.caption or "")


def test_what_the_engine_held_is_tabled_per_level():
    section = twin_section(twin(), sweep())
    assert section is not None
    held = blocks(section, Table)[1]
    assert held.header[:4] == ["load", "requests", "decoding: streams", "replayed"]
    assert held.rows[1] == ["concurrency 8", "32", "7.2", "6.8", "8.0", "1"]


def test_the_plot_puts_measured_markers_on_the_replayed_line_and_its_interval():
    plot = twin_plot(twin(), sweep())
    assert plot.missing is None and plot.title == TITLE
    assert [p.name for p in plot.panels] == ["ttft", "tpot"]
    assert plot.runs == ("measured", "replayed")
    tpot = [s for s in plot.lines() if s.panel == "tpot"]
    measured = next(s for s in tpot if s.run == "measured")
    replayed = next(s for s in tpot if s.run == "replayed")
    assert measured.x == replayed.x == (1.0, 8.0, 32.0)  # the summary's concurrencies
    assert measured.y == (10, 15, 30) and measured.role == "points"
    assert replayed.y == (10.4, 14.1, 31.5) and replayed.role == "frontier"
    (ttft_band,) = [i for i in plot.intervals() if i.panel == "ttft"]
    assert isinstance(ttft_band, Interval)
    assert ttft_band.low == (19, 190, 1100) and ttft_band.high == (23, 230, 1400)
    assert plot.panels[0].y_scale == "log"  # 19 to 1,400 ms
    assert plot.panels[1].y_scale == "linear" and plot.panels[1].y_max == pytest.approx(33 * 1.08)
    svg = render_svg(plot)
    assert 'fill-opacity="0.22"' in svg or "fill-opacity: 0.22" in svg  # the shaded band
    assert render_png(plot).startswith(PNG_MAGIC)


def test_a_replayed_level_not_in_the_summary_is_left_out_of_the_plot_with_a_note():
    plot = twin_plot(twin(), sweep()[:2])
    assert plot.line("TPOT p50", "measured").x == (1.0, 8.0)
    assert plot.notes == (
        "1 replayed level(s) left out: not on the concurrency axis of summary.json",
    )


def test_markdown_shows_the_section_its_numbers_and_the_plot(written):
    run_dir, markdown, _ = written
    assert f"[{TITLE}](#twin)" in markdown
    text = markdown_section(markdown)
    assert "fitted from 12,345 gaps of 96 requests" in text
    assert "| concurrency 8 | 200 | 212 (190–230) | +6.0% |" in text
    assert "**+40.0%**" in text  # the far-off cell, marked
    assert "| per\\_context\\_token | 2.1e-05 |" in text
    assert "| running\\_cap | 48 | command line --max-running-requests |" in text
    assert f"![{TITLE}](plots/twin.png)" in text
    assert (run_dir / "plots" / "twin.png").read_bytes().startswith(PNG_MAGIC)


def test_html_shows_the_section_its_numbers_and_the_inline_plot(written):
    _, _, html = written
    start = html.index('<section id="twin">')
    part = html[start : html.index('<section id="findings">')]
    assert f"<h2>5. {TITLE}</h2>" in part
    assert '<a href="#twin">' in html
    assert '<td class="">concurrency 8</td><td class="num">200</td>' in part
    assert '<td class="num">212 (190–230)</td><td class="num">+6.0%</td>' in part
    assert '<td class="num cell-bad">+40.0%</td>' in part
    figure = re.search(r'<figure id="plot-twin">\s*<svg.*?</svg>', part, re.S)
    assert figure is not None
    assert f"<figcaption><b>{TITLE}.</b>" in part


def test_a_run_without_twin_json_has_no_twin_section(tmp_path: Path):
    folder = write_run(tmp_path / "run", bench_summary())
    run = load_report_run(folder)
    assert run.twin is None and run.notes == []  # absent is not a problem
    assert "twin" not in [s.key for s in build_report(run).sections]
    files = write_report([folder])
    markdown, html = files.markdown.read_text(), files.html.read_text()
    assert TITLE not in markdown and TITLE not in html
    assert "## 5. Findings" in markdown
    assert not (folder / "plots" / "twin.png").exists()
    assert twin_section(None, sweep()) is None
    assert "twin" not in [s.key for s in build_report(report_run()).sections]


def test_a_twin_json_that_cannot_be_read_is_left_out_with_a_note(run_dir: Path):
    (run_dir / "twin.json").write_text('{"schema": "servelab.twin/99"}')
    run = load_report_run(run_dir)
    assert run.twin is None
    assert len(run.notes) == 1 and run.notes[0].startswith("twin.json left out: ")
    markdown = write_report([run_dir]).markdown.read_text()
    assert TITLE not in markdown
    assert "twin.json left out: " in markdown


def test_a_report_without_plots_keeps_the_tables():
    section = twin_section(twin(), sweep(), plots=False)
    assert section is not None
    assert not blocks(section, Figure)
    assert len(blocks(section, Table)) == 4
