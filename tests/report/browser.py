"""Headless Chromium for the report tests: a screenshot, the DOM after scripts ran, and the
network requests the page made.

The report must be one self-contained file. `render_page` opens it in Chromium with every host
unresolvable (`--host-resolver-rules`), so nothing can leave the machine, and reads Chromium's
NetLog for what the page still asked for: a page that needs the network shows it as a request
that failed with ERR_NAME_NOT_RESOLVED, and a self-contained page shows none. Chromium asks
Google for a few things itself whatever the flags say (the Optimization Guide's component
manifest, the signed-in accounts); those requests carry no initiator and are kept apart in
`PageRender.browser_requests`.

`measure_page` reads what the page looks like: the computed style and box of chosen elements and
the page's own width. The report's CSP forbids scripts, so it opens a copy of the page with one
probe script added and allowed by its hash alone (`script-src 'sha256-…'`); the probe writes
its JSON into the DOM, which `--dump-dom` returns. Everything else of the policy is unchanged,
so the styles are those of the page as shipped.

What the NetLog cannot show: loads of other `file://` URLs (Chromium reads those without its
network stack), so a report test should also check the DOM for references to other files.

`require_chromium` skips a test where Chromium is missing, or fails it with `CI=true`;
`tools/install-test-services.sh` installs it (Debian's `chromium`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from PIL import Image

from servelab.core.processes import describe_exit, signal_group
from tests.ci import missing

__all__ = [
    "BLOCK_ALL_HOSTS",
    "DEFAULT_HEIGHT",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_VIRTUAL_TIME_BUDGET_MS",
    "DEFAULT_WIDTH",
    "BrowserError",
    "ElementBox",
    "NetRequest",
    "PageLayout",
    "PageRender",
    "body_attributes",
    "find_chromium",
    "is_blank",
    "measure_page",
    "render_page",
    "require_chromium",
]

BLOCK_ALL_HOSTS = "MAP * ~NOTFOUND"
"""Host resolver rules that fail every name and IP literal with ERR_NAME_NOT_RESOLVED before
any DNS lookup or connect."""

DEFAULT_TIMEOUT_S = 60.0
"""Wall-clock limit of one Chromium run; a launch takes about a second on two cores."""

DEFAULT_WIDTH = 1280
DEFAULT_HEIGHT = 3000
"""Window size in CSS pixels. The command line cannot take a full-page screenshot, so the
window is tall enough for a report's first screens."""

DEFAULT_VIRTUAL_TIME_BUDGET_MS = 2000
"""Virtual time the page gets after load: timers a payload sets up fire before the DOM is
dumped. Virtual, so it costs no wall-clock time on an idle page."""

INSTALL_HINT = "tools/install-test-services.sh (as root) installs Debian's chromium"

_CANDIDATES = ("chromium", "chromium-browser")
_DEBIAN_PATH = "/usr/bin/chromium"

_NO_INITIATOR = "not an origin"
"""The NetLog's initiator of a request no page made (Chromium's own)."""

_QUIET_FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-color-profile=srgb",
    "--mute-audio",
    "--password-store=basic",
    # Chromium's own traffic, which would otherwise crowd the NetLog.
    "--no-first-run",
    "--no-default-browser-check",
    "--no-pings",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-breakpad",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--metrics-recording-only",
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate",
)

_WIRE_EVENTS = frozenset(
    {
        "HOST_RESOLVER_MANAGER_JOB",
        "HOST_RESOLVER_DNS_TASK",
        "HOST_RESOLVER_SYSTEM_TASK",
        "TCP_CONNECT",
        "SOCKET_BYTES_SENT",
        "SSL_SOCKET_BYTES_SENT",
        "UDP_BYTES_SENT",
        "BIDIRECTIONAL_STREAM_BYTES_SENT",
    }
)
"""NetLog events that mean something went past the resolver rules: a real name lookup, a
connect, bytes sent. (UDP_CONNECT alone sends nothing: Chromium's IPv6 reachability check.)"""

_STDERR_TAIL_LINES = 20


class BrowserError(RuntimeError):
    """Chromium did not render the page: it failed, timed out or wrote no output."""


@dataclass(frozen=True)
class NetRequest:
    """One URL request from the NetLog; `error` is the net error it ended with, if any."""

    url: str
    method: str
    initiator: str
    error: str | None

    @property
    def from_page(self) -> bool:
        """A page asked for it (it has an initiator origin; `null` for a file:// page)."""
        return self.initiator != _NO_INITIATOR


@dataclass(frozen=True)
class PageRender:
    """What Chromium made of a page."""

    screenshot: Path
    dom: str
    """The serialized DOM after load and the virtual time budget (`--dump-dom`)."""
    netlog: Path
    requests: tuple[NetRequest, ...]
    """Requests the page made; empty for a self-contained page."""
    browser_requests: tuple[NetRequest, ...]
    """Chromium's own requests, which no page made."""
    wire: tuple[str, ...]
    """NetLog events that reached a real resolver or a socket; empty when nothing could leave
    the machine."""

    @property
    def failed_loads(self) -> tuple[str, ...]:
        """The page's requests that failed, as `url: ERR_...`."""
        return tuple(f"{r.url}: {r.error}" for r in self.requests if r.error is not None)


def find_chromium() -> str | None:
    """The Chromium command on PATH, else Debian's path, else None."""
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return _DEBIAN_PATH if os.access(_DEBIAN_PATH, os.X_OK) else None


def require_chromium() -> str:
    """Chromium's path; where it is missing, skip the calling test, or fail it with CI=true."""
    found = find_chromium()
    if found is not None:
        return found
    why = f"no chromium on PATH or at {_DEBIAN_PATH} ({INSTALL_HINT})"
    missing(why)


def render_page(
    chromium: str,
    html: Path,
    out_dir: Path,
    *,
    width: int = DEFAULT_WIDTH,
    height: int = DEFAULT_HEIGHT,
    host_rules: str = BLOCK_ALL_HOSTS,
    virtual_time_budget_ms: int = DEFAULT_VIRTUAL_TIME_BUDGET_MS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> PageRender:
    """Open `html` in headless Chromium once: a screenshot, the DOM and a NetLog land in
    `out_dir` as `<stem>.png`, `<stem>.netlog.json`; raise BrowserError if it fails.

    `host_rules` replaces BLOCK_ALL_HOSTS only to prove the detector (a test lets one loopback
    address through and sees it in `wire`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    screenshot = out_dir / f"{html.stem}.png"
    netlog = out_dir / f"{html.stem}.netlog.json"
    screenshot.unlink(missing_ok=True)
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=out_dir))
    command = [
        chromium,
        *_QUIET_FLAGS,
        *(["--no-sandbox"] if os.geteuid() == 0 else []),
        f"--user-data-dir={profile}",
        f"--host-resolver-rules={host_rules}",
        f"--log-net-log={netlog}",
        f"--window-size={width},{height}",
        f"--virtual-time-budget={virtual_time_budget_ms}",
        f"--screenshot={screenshot}",
        "--dump-dom",
        html.resolve().as_uri(),
    ]
    try:
        dom = _run(command, timeout_s)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if not screenshot.is_file():
        raise BrowserError(f"chromium wrote no screenshot of {html}")
    requests, wire = _read_netlog(netlog)
    return PageRender(
        screenshot=screenshot,
        dom=dom,
        netlog=netlog,
        requests=tuple(r for r in requests if r.from_page),
        browser_requests=tuple(r for r in requests if not r.from_page),
        wire=wire,
    )


@dataclass(frozen=True)
class ElementBox:
    """The first element a selector matched: its computed style and its box, in CSS px."""

    selector: str
    style: dict[str, str]
    """The asked properties of getComputedStyle, as the browser serialises them."""
    left_px: float
    right_px: float
    width_px: float
    scroll_width_px: float
    """The element's content width, overflow included (wider than `width_px` when it scrolls)."""


@dataclass(frozen=True)
class PageLayout:
    """What a page looks like once laid out."""

    viewport_width_px: float
    """The page's width (the root's client width, no scrollbar)."""
    document_width_px: float
    """The root's scroll width: over `viewport_width_px` when the page scrolls sideways."""
    elements: dict[str, ElementBox | None]
    """By selector; None where nothing matched."""


_PROBE_ID = "servelab-probe"
_PROBE_JSON = re.compile(rf'<pre id="{_PROBE_ID}">(.*?)</pre>', re.S)
_CSP = re.compile(r'(<meta http-equiv="Content-Security-Policy" content=")([^"]*)(")')


def measure_page(
    chromium: str,
    html: Path,
    out_dir: Path,
    selectors: Sequence[str],
    properties: Sequence[str],
    *,
    width: int = DEFAULT_WIDTH,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> PageLayout:
    """Lay `html` out in Chromium and read, for each selector's first match, the computed
    `properties` and its box; raise BrowserError where the probe did not run."""
    probe = (
        "(() => {"
        f"const sel = {json.dumps(list(selectors))}, props = {json.dumps(list(properties))};"
        "const root = document.documentElement, out = {viewport: root.clientWidth,"
        " document: root.scrollWidth, elements: {}};"
        "for (const s of sel) { const e = document.querySelector(s);"
        " if (!e) { out.elements[s] = null; continue; }"
        " const c = getComputedStyle(e), r = e.getBoundingClientRect(), st = {};"
        " for (const p of props) st[p] = c.getPropertyValue(p);"
        " out.elements[s] = {style: st, left: r.left, right: r.right, width: r.width,"
        " scroll: e.scrollWidth}; }"
        f"const pre = document.createElement('pre'); pre.id = '{_PROBE_ID}';"
        "pre.textContent = JSON.stringify(out); document.body.append(pre);"
        "})();"
    )
    digest = base64.b64encode(hashlib.sha256(probe.encode()).digest()).decode()
    page = html.read_text(encoding="utf-8")
    if not _CSP.search(page):
        raise BrowserError(f"{html} has no Content-Security-Policy meta tag to extend")
    page = _CSP.sub(lambda m: f"{m[1]}{m[2]}; script-src 'sha256-{digest}'{m[3]}", page, 1)
    page = page.replace("</body>", f"<script>{probe}</script>\n</body>", 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / f"{html.stem}.measured.html"
    copy.write_text(page, encoding="utf-8")
    render = render_page(chromium, copy, out_dir, width=width, timeout_s=timeout_s)
    found = _PROBE_JSON.search(render.dom)
    if found is None:
        raise BrowserError(f"the probe script did not run in {copy}")
    data = json.loads(unescape(found.group(1)))
    return PageLayout(
        viewport_width_px=float(data["viewport"]),
        document_width_px=float(data["document"]),
        elements={
            s: None
            if e is None
            else ElementBox(
                selector=s,
                style=dict(e["style"]),
                left_px=float(e["left"]),
                right_px=float(e["right"]),
                width_px=float(e["width"]),
                scroll_width_px=float(e["scroll"]),
            )
            for s, e in data["elements"].items()
        },
    )


def is_blank(png: Path, *, tolerance: int = 8) -> bool:
    """Every pixel within `tolerance` (0-255, per channel) of one colour: nothing rendered."""
    with Image.open(png) as image:
        extrema = image.convert("RGB").getextrema()
    return all(high - low <= tolerance for low, high in extrema)


def body_attributes(dom: str) -> dict[str, str | None]:
    """The attributes of the DOM's `<body>`, where a test payload marks that it ran."""
    parser = _BodyParser()
    parser.feed(dom)
    return parser.attributes


def _run(command: list[str], timeout_s: float) -> str:
    """Run Chromium in its own process group (its renderer and GPU processes go with it);
    return its stdout."""
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except OSError as error:
        raise BrowserError(f"cannot start {command[0]}: {error}") from error
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        signal_group(process.pid, signal.SIGKILL)
        _, stderr = process.communicate()
        raise BrowserError(
            f"chromium timed out after {timeout_s:g} s; stderr ends:\n{_tail(stderr)}"
        ) from None
    finally:
        signal_group(process.pid, signal.SIGKILL)
    if process.returncode != 0:
        raise BrowserError(
            f"chromium failed ({describe_exit(process.returncode)}); stderr ends:\n{_tail(stderr)}"
        )
    return stdout


def _tail(stderr: str) -> str:
    """The last lines of Chromium's stderr, without the D-Bus complaints of a bare container."""
    lines = [line for line in stderr.splitlines() if "/dbus/" not in line]
    return "\n".join(lines[-_STDERR_TAIL_LINES:]) or "(empty)"


def _read_netlog(path: Path) -> tuple[list[NetRequest], tuple[str, ...]]:
    """The URL requests in a NetLog and its wire events, named through the log's own
    constants table (the numbers change between Chromium versions)."""
    try:
        log = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise BrowserError(f"cannot read chromium's NetLog {path}: {error}") from error
    constants = log["constants"]
    names = {number: name for name, number in constants["logEventTypes"].items()}
    errors = {number: name for name, number in constants["netError"].items()}
    begin, end = constants["logEventPhase"]["PHASE_BEGIN"], constants["logEventPhase"]["PHASE_END"]

    started: dict[int, dict[str, Any]] = {}
    ended: dict[int, int] = {}
    wire: list[str] = []
    for event in log["events"]:
        name = names.get(event["type"], "")
        params = event.get("params") or {}
        source = event["source"]["id"]
        if name == "URL_REQUEST_START_JOB" and event["phase"] == begin:
            started.setdefault(source, params)
        elif name == "REQUEST_ALIVE" and event["phase"] == end and params.get("net_error"):
            ended[source] = params["net_error"]
        if name in _WIRE_EVENTS and event["phase"] != end:
            wire.append(f"{name} {json.dumps(params, sort_keys=True)}")

    requests = [
        NetRequest(
            url=params.get("url", ""),
            method=params.get("method", ""),
            initiator=params.get("initiator", _NO_INITIATOR),
            error=errors.get(ended[source], str(ended[source])) if source in ended else None,
        )
        for source, params in started.items()
    ]
    return requests, tuple(wire)


class _BodyParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attributes: dict[str, str | None] = {}
        self._seen = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body" and not self._seen:
            self._seen = True
            self.attributes = dict(attrs)
