"""The browser harness can fail: each detector is shown to see what it looks for.

Every render is one Chromium launch (under a second); each page is rendered once per module
and its assertions share it.
"""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from tests.report import browser
from tests.report.browser import (
    BLOCK_ALL_HOSTS,
    BrowserError,
    PageRender,
    body_attributes,
    is_blank,
    measure_page,
    render_page,
    require_chromium,
)

PAYLOAD = "<script>document.body.setAttribute('data-pwned','1')</script>"
ESCAPED_PAYLOAD = PAYLOAD.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

SELF_CONTAINED = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>servelab report</title>
<style>body {{ font-family: sans-serif; margin: 2em; }}</style></head>
<body><h1>State of the union</h1><p>model: {ESCAPED_PAYLOAD}</p>
<svg width="400" height="200" xmlns="http://www.w3.org/2000/svg">
<rect width="400" height="200" fill="#eef"/>
<polyline points="0,180 100,120 200,60 300,50 400,48" stroke="#36c" stroke-width="4" fill="none"/>
</svg></body></html>
"""

REMOTE_IMAGE = "http://example.invalid/x.png"
REMOTE_STYLESHEET = "https://fonts.example.com/a.css"
REMOTE = f"""<!doctype html>
<html><head><link rel="stylesheet" href="{REMOTE_STYLESHEET}"></head>
<body><p>needs the network</p><img src="{REMOTE_IMAGE}"></body></html>
"""

SCRIPTED = f"""<!doctype html>
<html><body><p>runs a script</p>{PAYLOAD}
<img src="missing.png" onerror="document.body.setAttribute('data-onerror','1')"></body></html>
"""

BLANK = '<!doctype html><html><body style="background: #fff"></body></html>\n'


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_chromium()


@pytest.fixture(scope="module")
def render(chromium: str, tmp_path_factory: pytest.TempPathFactory):
    """Render one page's HTML (written as `<name>.html`) in Chromium with every host blocked."""
    out = tmp_path_factory.mktemp("browser")

    def run(name: str, html: str, **options: str) -> PageRender:
        page = out / f"{name}.html"
        page.write_text(html)
        return render_page(chromium, page, out, **options)

    return run


@pytest.fixture(scope="module")
def self_contained(render) -> PageRender:
    return render("self-contained", SELF_CONTAINED)


@pytest.fixture(scope="module")
def remote(render) -> PageRender:
    return render("remote", REMOTE)


@pytest.fixture(scope="module")
def scripted(render) -> PageRender:
    return render("scripted", SCRIPTED)


def test_self_contained_page_renders_and_requests_nothing(self_contained: PageRender):
    assert not is_blank(self_contained.screenshot)
    with Image.open(self_contained.screenshot) as image:
        assert image.size == (browser.DEFAULT_WIDTH, browser.DEFAULT_HEIGHT)
    assert self_contained.requests == ()
    assert self_contained.failed_loads == ()
    assert self_contained.wire == ()


def test_remote_loads_are_seen_and_never_leave_the_machine(remote: PageRender):
    assert {r.url for r in remote.requests} == {REMOTE_IMAGE, REMOTE_STYLESHEET}
    assert sorted(remote.failed_loads) == sorted(
        f"{url}: ERR_NAME_NOT_RESOLVED" for url in (REMOTE_IMAGE, REMOTE_STYLESHEET)
    )
    # Chromium's own requests are kept apart, and they too died at the resolver rules.
    assert all(not r.from_page for r in remote.browser_requests)
    assert all(r.error == "ERR_NAME_NOT_RESOLVED" for r in remote.browser_requests)
    assert remote.wire == ()


def test_scripts_run_and_show_in_the_dom(scripted: PageRender):
    marks = body_attributes(scripted.dom)
    assert marks.get("data-pwned") == "1"
    assert marks.get("data-onerror") == "1"


def test_an_escaped_payload_stays_text(self_contained: PageRender):
    assert "data-pwned" not in body_attributes(self_contained.dom)
    assert ESCAPED_PAYLOAD in self_contained.dom


def test_a_blank_page_is_blank(render):
    assert is_blank(render("blank", BLANK).screenshot)


def test_is_blank_sees_a_single_pixel(tmp_path: Path):
    png = tmp_path / "white.png"
    image = Image.new("RGB", (64, 64), "white")
    image.save(png)
    assert is_blank(png)
    image.putpixel((10, 10), (0, 0, 0))
    image.save(png)
    assert not is_blank(png)


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on 127.0.0.1 answering 404; yields its port and the paths asked for."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            paths.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], paths
    server.shutdown()
    server.server_close()
    thread.join()


def test_wire_sees_a_load_the_rules_let_through(render, loopback_server: tuple[int, list[str]]):
    """`wire == ()` means something: with 127.0.0.1 let through, the connect is in the log;
    with every host blocked, an IP literal is refused too and the server hears nothing."""
    port, paths = loopback_server
    html = f'<!doctype html><body><img src="http://127.0.0.1:{port}/x.png"></body>\n'

    blocked = render("loopback-blocked", html)
    assert [r.error for r in blocked.requests] == ["ERR_NAME_NOT_RESOLVED"]
    assert blocked.wire == ()
    assert paths == []

    allowed = render("loopback-allowed", html, host_rules=f"{BLOCK_ALL_HOSTS}, EXCLUDE 127.0.0.1")
    url = f"http://127.0.0.1:{port}/x.png"
    assert [(r.url, r.error) for r in allowed.requests] == [(url, None)]
    assert any(event.startswith("TCP_CONNECT ") for event in allowed.wire)
    assert paths == ["/x.png"]


STYLED = """<!doctype html>
<html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<style>body { font: 15px/1.5 "DejaVu Sans", serif; } td { border: 1px solid #d9dee4; }
div.wide { width: 3000px; }</style></head>
<body><table><tr><td>cell</td></tr></table><div class="wide">wide</div>
<script>document.body.setAttribute('data-pwned', '1')</script></body></html>
"""


def test_measure_page_reads_computed_styles_and_widths(chromium: str, tmp_path: Path):
    """The probe sees the stylesheet's values, a stylesheet broken by escaping as the fallback
    it is, and a page wider than its window; the page's own script stays blocked."""
    asked = ["font-family", "border-top-width", "border-top-style", "border-top-color"]
    good = tmp_path / "styled.html"
    good.write_text(STYLED)
    layout = measure_page(
        chromium, good, tmp_path / "good", ["body", "td", "div.wide", "h6"], asked
    )
    body, td = layout.elements["body"], layout.elements["td"]
    assert body is not None and body.style["font-family"] == '"DejaVu Sans", serif'
    assert td is not None and td.style["border-top-width"] == "1px"
    assert (td.style["border-top-style"], td.style["border-top-color"]) == (
        "solid",
        "rgb(217, 222, 228)",
    )
    assert layout.elements["h6"] is None
    assert layout.viewport_width_px == browser.DEFAULT_WIDTH
    assert layout.document_width_px > 3000 > layout.viewport_width_px
    wide = layout.elements["div.wide"]
    assert wide is not None and wide.width_px == 3000 and wide.right_px > layout.viewport_width_px

    broken = tmp_path / "broken.html"
    broken.write_text(STYLED.replace('"DejaVu Sans"', "&#34;DejaVu Sans&#34;"))
    fallback = measure_page(chromium, broken, tmp_path / "broken", ["body"], asked)
    assert fallback.elements["body"] is not None
    assert "DejaVu Sans" not in fallback.elements["body"].style["font-family"]

    plain = render_page(chromium, tmp_path / "good" / "styled.measured.html", tmp_path / "again")
    assert "data-pwned" not in body_attributes(plain.dom)


def test_a_failing_chromium_is_one_clear_error(tmp_path: Path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\necho 'no display, no luck' >&2\nexit 3\n")
    fake.chmod(0o755)
    page = tmp_path / "page.html"
    page.write_text(BLANK)
    with pytest.raises(BrowserError, match=r"exit code 3(.|\n)*no display, no luck"):
        render_page(str(fake), page, tmp_path / "out")


def test_a_hung_chromium_is_killed_at_the_timeout(tmp_path: Path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    page = tmp_path / "page.html"
    page.write_text(BLANK)
    with pytest.raises(BrowserError, match=re.escape("timed out after 0.5 s")):
        render_page(str(fake), page, tmp_path / "out", timeout_s=0.5)


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [("TRUE", pytest.fail.Exception), ("1", pytest.fail.Exception), ("", pytest.skip.Exception)],
)
def test_missing_chromium_skips_or_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
):
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=re.escape("tools/install-test-services.sh")):
        require_chromium()
