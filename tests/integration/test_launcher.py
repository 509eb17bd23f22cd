"""The launcher: readiness, start-up failures, and nothing left running after stop."""

from __future__ import annotations

import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError, EngineLaunchError
from servelab.core.processes import group_alive
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import launch_engine
from servelab.engines.registry import get_adapter, register
from tests.sessions import session_left

# A server that forks a grandchild ignoring SIGTERM, answers /health after `delay` seconds
# (never when delay < 0), and itself ignores SIGTERM when asked to.
STUBBORN = textwrap.dedent(
    """
    import http.server, os, signal, subprocess, sys, time
    port, delay, deaf = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "deaf"
    subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    if sys.argv[4] == "escape":  # a child in a group of its own: out of the group, in the session
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         process_group=0)
    if deaf:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"stub starting, pid {os.getpid()}", flush=True)
    if delay < 0:
        time.sleep(600)
    time.sleep(delay)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


class StubAdapter:
    name = "stub"
    description = "a test server with a stubborn grandchild"
    launches = True
    health_path = "/health"
    pinning_fields = frozenset()
    has_tokenize = False

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        return spec

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        delay = str(spec.options.get("delay", 0))
        deaf = "deaf" if spec.options.get("deaf") else "polite"
        escape = "escape" if spec.options.get("escape") else "stay"
        return [sys.executable, "-c", STUBBORN, str(port), delay, deaf, escape]


register(StubAdapter())


@pytest.mark.parametrize("deaf", [False, True])
def test_stop_leaves_no_process_of_the_group(tmp_path: Path, deaf: bool):
    engine = launch_engine(
        EngineSpec(engine="stub", options={"deaf": deaf}), log_path=tmp_path / "engine.log"
    )
    assert engine.url.startswith("http://127.0.0.1:")
    pgid = engine.pid
    assert group_alive(pgid)
    engine.stop(grace_s=1.0)
    assert not group_alive(pgid)
    assert session_left(pgid) == []  # the whole session, not only the group
    assert f"stub starting, pid {pgid}" in (tmp_path / "engine.log").read_text()


def test_stop_leaves_no_process_of_the_session_even_out_of_the_group(tmp_path: Path):
    engine = launch_engine(
        EngineSpec(engine="stub", options={"escape": True}), log_path=tmp_path / "engine.log"
    )
    sid = engine.pid
    engine.stop(grace_s=1.0)
    assert not group_alive(sid)
    assert session_left(sid, wait_s=2.0) == []


def test_engine_that_dies_while_starting_shows_its_last_log_lines(tmp_path: Path):
    spec = EngineSpec(engine="sim", extra_args=["--no-such-flag"], startup_timeout_s=60)
    with pytest.raises(EngineLaunchError) as caught:
        launch_engine(spec, log_path=tmp_path / "engine.log")
    assert "exited with code 2" in str(caught.value)
    assert any("no-such-flag" in line for line in caught.value.log_tail)
    assert caught.value.log_path == str(tmp_path / "engine.log")


def test_start_up_timeout_stops_the_engine(tmp_path: Path):
    spec = EngineSpec(engine="stub", options={"delay": -1}, startup_timeout_s=1.0)
    with pytest.raises(EngineLaunchError, match="not ready after 1 s") as caught:
        launch_engine(spec, log_path=tmp_path / "engine.log")
    [started] = [line for line in caught.value.log_tail if line.startswith("stub starting")]
    pgid = int(started.rsplit(" ", 1)[1])  # the engine leads its own process group
    assert not group_alive(pgid)  # the engine and its SIGTERM-deaf grandchild are gone
    assert session_left(pgid) == []
    assert "engine exited with code" in (tmp_path / "engine.log").read_text()


def test_slow_engine_is_waited_for(tmp_path: Path):
    start = time.monotonic()
    engine = launch_engine(
        EngineSpec(engine="stub", options={"delay": 1.5}), log_path=tmp_path / "engine.log"
    )
    try:
        assert time.monotonic() - start >= 1.5  # the stub listens only after 1.5 s
        with urllib.request.urlopen(engine.url + "/health", timeout=5) as response:
            assert response.status == 200  # returned once ready, not at a timeout
        assert engine.process.poll() is None
    finally:
        engine.stop(grace_s=1.0)


def test_unknown_engine_names_the_closest():
    with pytest.raises(ConfigError, match="did you mean 'embedded'"):
        get_adapter("embeded")


def test_engine_env_is_added_to_the_parents(tmp_path: Path, start_sim, monkeypatch):
    monkeypatch.setenv("SERVELAB_PARENT_MARK", "1")
    spec = EngineSpec(engine="stub", env={"SERVELAB_CHILD_MARK": "2"})
    engine = launch_engine(spec, log_path=tmp_path / "engine.log")
    try:
        environ = Path(f"/proc/{engine.pid}/environ").read_bytes().split(b"\0")
        assert b"SERVELAB_PARENT_MARK=1" in environ and b"SERVELAB_CHILD_MARK=2" in environ
    finally:
        engine.stop(grace_s=1.0)


def test_an_event_names_its_line_of_engine_log(tmp_path: Path):
    """A log event's line number is engine.log's own, the launcher's note counted."""
    from servelab.engines.watched import launch_watched

    log = tmp_path / "engine.log"
    watched = launch_watched(
        EngineSpec(engine="sim", options={"ttft_ms": 1, "itl_ms": 1}, startup_timeout_s=60),
        log_path=log,
    )
    watched.engine.stop()
    assert watched.matcher is not None
    ready = next(e for e in watched.matcher.events if e.kind.value == "engine_ready")
    lines = log.read_text().splitlines()
    assert "servelab: launching" in lines[0]
    assert "serving on http://127.0.0.1:" in lines[ready.line_no - 1]
