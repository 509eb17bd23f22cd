"""The report of a real embedded run, opened in headless Chromium with every host unresolvable:
it renders, it asks for nothing outside itself, and a hostile name never runs. The run is
given a quality.json (a configuration that drifted from a reference run, one answer in its
diff hostile) so the Quality section renders too."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from servelab.bench.quality.results import write_quality
from servelab.report import parse_target, write_report
from tests.conftest import DemoRun
from tests.diagnose.quality_runs import REFERENCE_RUN, quality_result
from tests.report.browser import (
    PageLayout,
    PageRender,
    body_attributes,
    is_blank,
    measure_page,
    render_page,
    require_chromium,
)

# Both would mark <body> if they ever ran as markup.
SCRIPT = "<script>document.body.setAttribute('data-pwned','script')</script>"
IMAGE = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"

_RESOURCE_ATTRIBUTES = frozenset({"src", "href", "xlink:href", "action", "srcset", "data"})


class _References(HTMLParser):
    """Every attribute of a real tag that can make a page load something."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [v or "" for k, v in attrs if k in _RESOURCE_ATTRIBUTES]


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.found


@pytest.fixture(scope="module")
def hostile_run(demo_run: DemoRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's run, its model and a note renamed to the payloads, reported again."""
    assert demo_run.result.returncode == 0, demo_run.result.stderr[-2000:]
    run = tmp_path_factory.mktemp("hostile") / "run"
    shutil.copytree(demo_run.out, run)
    summary = json.loads((run / "summary.json").read_text())
    summary["run"]["target"]["model"] = SCRIPT
    summary["run"]["notes"].append(IMAGE)
    (run / "summary.json").write_text(json.dumps(summary))
    write_quality(run, _drifted_quality())
    write_report([run], targets=[parse_target("total=1")], title=f"{SCRIPT} {IMAGE}")
    return run


def _drifted_quality():
    """A configuration drift against a reference run; the worst probe's answer is a payload."""
    quality = quality_result(moved={"configuration"}, reference=True, diverge=True)
    config = quality.comparisons[-1]
    diff = [config.diff[0].model_copy(update={"candidate": [SCRIPT]}), *config.diff[1:]]
    comparisons = [*quality.comparisons[:-1], config.model_copy(update={"diff": diff})]
    return quality.model_copy(update={"comparisons": comparisons})


@pytest.fixture(scope="module")
def page(hostile_run: Path, tmp_path_factory: pytest.TempPathFactory) -> PageRender:
    chromium = require_chromium()
    return render_page(chromium, hostile_run / "report.html", tmp_path_factory.mktemp("chromium"))


_STYLE = [
    "font-family",
    "font-size",
    "border-collapse",
    "border-top-width",
    "border-top-style",
    "border-top-color",
]


@pytest.fixture(scope="module")
def layout(hostile_run: Path, tmp_path_factory: pytest.TempPathFactory) -> PageLayout:
    chromium = require_chromium()
    return measure_page(
        chromium,
        hostile_run / "report.html",
        tmp_path_factory.mktemp("measured"),
        ["body", "main table", "main td", "pre", ".table-scroll"],
        _STYLE,
    )


def test_the_stylesheet_is_the_one_the_page_uses(layout: PageLayout):
    """Fonts and borders are report.css's: an escaped stylesheet (`&#34;Segoe UI&#34;`) drops
    every font declaration and the page falls back to the browser's serif."""
    body, table, cell, pre = (layout.elements[s] for s in ("body", "main table", "main td", "pre"))
    assert body is not None and table is not None and cell is not None and pre is not None
    assert body.style["font-family"] == (
        'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'
    )
    assert body.style["font-size"] == "15px"
    assert pre.style["font-family"].startswith("ui-monospace, SFMono-Regular, ")
    assert table.style["border-collapse"] == "collapse"
    assert (cell.style["border-top-width"], cell.style["border-top-style"]) == ("1px", "solid")
    assert cell.style["border-top-color"] == "rgb(217, 222, 228)"  # --line


def test_no_table_is_wider_than_the_page(layout: PageLayout):
    table, frame = layout.elements["main table"], layout.elements[".table-scroll"]
    assert table is not None and table.right_px <= layout.viewport_width_px
    assert frame is not None and frame.scroll_width_px <= frame.width_px + 1
    assert layout.document_width_px <= layout.viewport_width_px


def test_the_report_renders_to_a_screenshot_that_is_not_blank(page: PageRender):
    assert page.screenshot.stat().st_size > 10_000
    assert not is_blank(page.screenshot)
    for section in (
        "Goal and targets",
        "Machine",
        "Engine",
        "Results",
        "Quality",
        "Findings",
        "Status",
    ):
        assert section in page.dom


def test_the_quality_section_renders_its_verdict_and_diff(page: PageRender):
    start = page.dom.index('<section id="quality">')
    section = page.dom[start : page.dom.index('<section id="findings">', start)]
    assert re.search(r"<h2>\d+\. Quality</h2>", section)
    assert '<td class=" cell-bad">drift</td>' in section
    assert f'<td class="">{REFERENCE_RUN}:before vs before</td>' in section
    # the diff: where the worst probes' answers part, reference against this run
    assert "where the worst probes' answers first part" in section
    assert '<td class="">" w103 w104 w105 w106 w107 w108 w109 w110"</td>' in section
    assert '" w900 w901 w902 w903 w904 w905 w906 w907"' in section
    assert '"&lt;script&gt;document.body.setAttribute' in section


def test_the_page_asks_for_nothing_outside_itself(page: PageRender, hostile_run: Path):
    assert not page.requests and not page.failed_loads and not page.wire
    html = (hostile_run / "report.html").read_text()
    # Other file:// loads bypass the NetLog: no attribute may point anywhere but inside.
    references = _references(html)
    assert references and all(ref.startswith("#") for ref in references), references
    assert "@import" not in html and not re.search(r"url\((?!#)", html)
    assert "<svg" in html and "<script" not in html.lower()


def test_a_hostile_model_name_title_and_note_never_run(page: PageRender):
    assert "data-pwned" not in body_attributes(page.dom)
    # ... and are shown as the text they are
    assert "&lt;script&gt;document.body.setAttribute" in page.dom
    assert "&lt;img src=x onerror=" in page.dom


def test_the_markdown_shows_the_payloads_as_text(hostile_run: Path):
    text = (hostile_run / "report.md").read_text()
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;" in text
    for link in re.findall(r"\]\((plots/[^)]+)\)", text):
        assert (hostile_run / link).read_bytes().startswith(b"\x89PNG")
