"""report.md and report.html from one Report: escaped, self-contained, written atomically."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from servelab.core import redact
from servelab.report import write_report
from servelab.report.document import (
    Bullets,
    Code,
    Figure,
    KeyValues,
    Paragraph,
    Report,
    Section,
    Table,
)
from servelab.report.html import render_html
from servelab.report.markdown import render_markdown
from servelab.report.plots import RunPlotInput, build_plots
from servelab.report.sections import build_report
from servelab.store import RunDir
from tests.diagnose.builders import write_run
from tests.report.builders import REPO, bench_summary, records, report_run, sweep

XSS = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CODE_WITH_FENCE = "echo start\n```\nnot the end\n````` five\necho end"


def plots():
    """The plots that have data for a sweep with streamed requests."""
    run = RunPlotInput(
        label="run", levels=sweep(), records=records(sweep()), telemetry_rows=[], metrics_rows=[]
    )
    return [p for p in build_plots([run]) if p.missing is None]


def hand_report(*extra: Section) -> Report:
    blocks = [
        Paragraph(XSS),
        Paragraph("*bold* _em_ `code` [link](http://example.com) # not a heading"),
        Table(["name", "value"], [["a|b", "c\\|d"], ["<b>x</b>", "1 & 2"]], caption="pipes | here"),
        KeyValues([("key|name", "va|lue")]),
        Bullets([("bad", "item *one*", ["sub _two_"])]),
        Code(CODE_WITH_FENCE, "console"),
    ]
    return Report(
        title=XSS,
        subtitle="a subtitle",
        sections=[Section("targets", "Goal", blocks), *extra],
        generator="servelab test",
    )


def markdown_html(text: str) -> str:
    """What a CommonMark viewer with GFM tables shows for `text`."""
    return MarkdownIt("commonmark").enable("table").render(text)


class Page(HTMLParser):
    """Every start tag of a page with its attributes, and the text outside tags."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.attrs: list[tuple[str, str, str | None]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] += 1
        self.attrs += [(tag, name, value) for name, value in attrs]

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_data(self, data):
        self.text.append(data)

    def values(self, *names: str) -> list[str]:
        return [value or "" for _, name, value in self.attrs if name in names]


# -- Markdown ------------------------------------------------------------------------------


def test_markdown_escapes_html_so_a_viewer_shows_it_as_text():
    text, _ = render_markdown(hand_report())
    assert "<script" not in text and "<b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    shown = markdown_html(text)
    assert "<script" not in shown and "<b>" not in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown


def test_markdown_escapes_emphasis_code_and_links_in_text():
    text, _ = render_markdown(hand_report())
    assert r"\*bold\* \_em\_ \`code\` \[link\](http://example.com) \# not a heading" in text
    shown = markdown_html(text)
    assert "<em>" not in shown and "<strong>" not in shown.split("</table>")[-1]
    assert '<a href="http://example.com">' not in shown
    assert "<p>*bold* _em_ `code` [link](http://example.com) # not a heading</p>" in shown


def test_markdown_table_cells_keep_their_pipes():
    text, _ = render_markdown(hand_report())
    assert r"| a\|b | c\\\|d |" in text
    shown = markdown_html(text)
    cells = re.findall(r"<td>(.*?)</td>", shown)
    assert cells[:4] == ["a|b", "c\\|d", "&lt;b&gt;x&lt;/b&gt;", "1 &amp; 2"]
    assert "<strong>key|name</strong>" in shown and "<td>va|lue</td>" in shown


def test_markdown_fences_code_with_a_longer_fence_than_any_run_inside():
    text, _ = render_markdown(hand_report())
    assert "``````console\n" + CODE_WITH_FENCE + "\n``````\n" in text
    shown = markdown_html(text)
    code = re.search(r'<pre><code class="language-console">(.*?)</code></pre>', shown, re.S)
    assert code is not None
    assert code.group(1) == CODE_WITH_FENCE + "\n"


def test_markdown_figures_are_png_files_beside_it():
    drawn = plots()
    report = hand_report(Section("results", "Results", [Figure(p) for p in drawn]))
    text, referenced = render_markdown(report)
    assert [p.key for p in referenced] == [p.key for p in drawn]
    for plot in drawn:
        assert f"![{plot.title}](plots/{plot.key}.png)" in text


def test_markdown_links_every_section_to_its_anchor():
    report = build_report(report_run())
    text, _ = render_markdown(report)
    for section in report.sections:
        assert f'<a id="{section.key}"></a>' in text
        assert f"](#{section.key})" in text


# -- HTML ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile():
    """A report whose title, model and run name are markup, with five plots drawn."""
    summary = bench_summary(target={"model": IMG}, name=IMG)
    report = build_report(report_run(summary, records=records(sweep())), title=XSS)
    return report, render_html(report)


def test_html_escapes_every_string_it_was_given(hostile):
    _, html = hostile
    assert XSS not in html and IMG not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    page = Page(html)
    assert "script" not in page.tags and "img" not in page.tags
    assert not [name for _, name, _ in page.attrs if name.startswith("on")]
    assert XSS in "".join(page.text)  # shown as written
    assert f"<title>{XSS.replace('<', '&lt;').replace('>', '&gt;')}</title>" in html


def test_html_loads_nothing_from_outside_the_page(hostile):
    """Links are #anchors, the SVG's references are its own #ids; the CSP forbids the rest."""
    _, html = hostile
    page = Page(html)
    assert not page.values("src")
    links = page.values("href", "xlink:href")
    assert links and all(link.startswith("#") for link in links)
    ids = set(page.values("id"))
    assert {link[1:] for link in links} <= ids
    urls = [
        u
        for v in page.values("style", "clip-path", "fill", "mask")
        for u in re.findall(r"url\(([^)]*)\)", v)
    ]
    assert all(u.startswith("#") and u[1:] in ids for u in urls)
    assert "@import" not in html and not re.search(r"url\((?!#)", html)
    csp = [
        value
        for tag, name, value in page.attrs
        if tag == "meta" and name == "content" and value and "default-src" in value
    ]
    assert csp == ["default-src 'none'; style-src 'unsafe-inline'; img-src data:"]
    assert 'http-equiv="Content-Security-Policy"' in html


def test_html_inlines_the_stylesheet_as_written(hostile):
    """Autoescaping would turn the stylesheet's quotes into `&#34;`, which CSS does not read:
    every font declaration would fall back. The <style> holds the file byte for byte."""
    _, html = hostile
    css = (REPO / "src/servelab/report/templates/report.css").read_text()
    styles = [s.strip() for s in re.findall(r"<style>(.*?)</style>", html, flags=re.S)]
    assert styles == [css.strip()]
    assert '"Segoe UI"' in styles[0] and "&#34;" not in styles[0] and "&quot;" not in styles[0]
    assert "&#34;" not in html.split("</head>")[0]


def test_html_has_one_svg_per_drawn_plot_and_every_anchor(hostile):
    report, html = hostile
    figures = [b for s in report.sections for b in s.blocks if isinstance(b, Figure)]
    assert len(figures) == 5
    page = Page(html)
    assert page.tags["svg"] == len(figures) == html.count("<svg")
    ids = page.values("id")
    assert len(ids) == len(set(ids))  # the plots' ids are prefixed, never clash
    keys = [s.key for s in report.sections] + [
        sub.key for s in report.sections for sub in s.subsections
    ]
    assert set(keys) <= set(ids)
    assert {f"plot-{f.plot.key}" for f in figures} <= set(ids)
    nav = [link[1:] for link in page.values("href") if link[1:] in keys]
    assert nav == [s.key for s in report.sections]


def test_html_marks_tones_and_bad_cells():
    report = Report(
        title="t",
        subtitle="s",
        sections=[
            Section(
                "targets",
                "Goal",
                [
                    Table(
                        ["a", "b"],
                        [["1", "2"], ["3", "4"]],
                        tones=["good", "bad"],
                        right=frozenset({1}),
                        bad=frozenset({(1, 0)}),
                    ),
                    Paragraph("careful", "warn"),
                ],
            )
        ],
        generator="g",
    )
    html = render_html(report)
    assert '<tr class="tone-good"><td class="">1</td><td class="num">2</td></tr>' in html
    assert '<tr class="tone-bad"><td class=" cell-bad">3</td>' in html
    assert '<p class="tone-warn">careful</p>' in html


# -- the files -----------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run of levels only: three plots to draw."""
    return write_run(tmp_path / "run", bench_summary())


def test_write_report_writes_html_markdown_and_png_plots(run_dir: Path, tmp_path: Path):
    RunDir(run_dir).append_requests(records(sweep()))
    out = tmp_path / "out"
    files = write_report([run_dir], out=out)
    assert (files.html, files.markdown) == (out / "report.html", out / "report.md")
    assert files.html.read_text().startswith("<!DOCTYPE html>")
    text = files.markdown.read_text()
    assert text.startswith("# servelab report: hand-built")
    assert sorted(files.plots) == sorted((out / "plots").glob("*.png"))
    assert len(files.plots) == 5
    for png in files.plots:
        assert png.read_bytes().startswith(PNG_MAGIC)
        assert f"](plots/{png.name})" in text
    assert not (run_dir / "report.html").exists()  # --out, not the run


def test_write_report_defaults_to_the_run_directory(run_dir: Path):
    files = write_report([run_dir])
    assert files.html == run_dir / "report.html" and files.markdown.exists()


def test_an_older_report_is_replaced_whole(run_dir: Path, tmp_path: Path):
    """A reader of the old file keeps reading the old one; no temporary file is left."""
    out = tmp_path / "out"
    write_report([run_dir], out=out, title="first")
    with (out / "report.html").open("rb") as old_html, (out / "report.md").open("rb") as old_md:
        write_report([run_dir], out=out, title="second")
        assert b"<title>first</title>" in old_html.read()
        assert old_md.read().startswith(b"# first\n")
    assert "<title>second</title>" in (out / "report.html").read_text()
    assert (out / "report.md").read_text().startswith("# second\n")
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_a_registered_secret_never_reaches_the_report(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(redact, "_secrets", set())
    secret = "Zq9plantedSecret42"
    redact.register_secret(secret)
    summary = bench_summary(notes=[f"started with --api-key {secret} by mistake"])
    write_run(run_dir, summary)  # written as is, as a peer's tool would
    assert secret in (run_dir / "summary.json").read_text()
    files = write_report([run_dir], out=tmp_path / "out")
    html, markdown = files.html.read_text(), files.markdown.read_text()
    assert secret not in html and secret not in markdown
    assert f"started with --api-key {redact.MASK} by mistake" in html
    assert "started with --api-key \\*\\*\\* by mistake" in markdown  # escaped as Markdown


@pytest.mark.parametrize("secret", ["hf_PlantedToken0123", "pa&ss<word>'42"])
def test_a_secret_with_markup_characters_never_reaches_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str
):
    """An HF token (hf_...) would be escaped to hf\\_... in report.md before the file's
    scrubber saw it: strings are scrubbed before they are escaped."""
    monkeypatch.setattr(redact, "_secrets", set())
    redact.register_secret(secret)
    run_dir = write_run(tmp_path / "run", bench_summary(notes=[f"token {secret} here"]))
    files = write_report([run_dir], out=tmp_path / "out")
    html, markdown = files.html.read_text(), files.markdown.read_text()
    assert f"token {redact.MASK} here" in html
    assert "token \\*\\*\\* here" in markdown  # the mask, escaped as Markdown shows it
    for text in (html, markdown):
        assert "PlantedToken" not in text and "ss&lt;word" not in text and "ss<word" not in text
