"""Starts an engine as a child process and stops it with nothing left behind.

The child gets its own process group (so every process it forks can be signalled at
once), listens on 127.0.0.1 and a free port, and writes stdout and stderr to
`engine.log`. It is ready when its health URL answers 200. Stopping sends SIGTERM to
the group, then SIGKILL after a grace period, and waits until the group is empty. On
Linux the child also receives SIGTERM if servelab itself dies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from servelab.core.errors import EngineLaunchError
from servelab.engines.base import EngineAdapter, EngineSpec
from servelab.engines.registry import get_adapter

__all__ = [
    "DEFAULT_STOP_GRACE_S",
    "LOCALHOST",
    "RunningEngine",
    "engine_running",
    "free_port",
    "launch_engine",
]

LOCALHOST = "127.0.0.1"
DEFAULT_STOP_GRACE_S = 10.0
_POLL_S = 0.25
_LOG_TAIL_LINES = 20


@dataclass
class RunningEngine:
    """An engine process that answered its health check."""

    adapter: EngineAdapter
    spec: EngineSpec
    url: str
    command: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, *, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        """SIGTERM the process group, SIGKILL what remains after `grace_s`, wait for all."""
        _stop_group(self.process, grace_s)


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def launch_engine(
    spec: EngineSpec,
    *,
    log_path: Path,
    port: int | None = None,
    on_status: Callable[[str], None] = lambda _msg: None,
) -> RunningEngine:
    """Prepare, start and wait for the engine; raise EngineLaunchError if it dies or stalls."""
    adapter = get_adapter(spec.engine)
    if not adapter.launches:
        raise EngineLaunchError(f"engine {adapter.name!r} is attached by URL, not launched")
    on_status(f"preparing {adapter.name}")
    spec = adapter.prepare(spec)
    port = port or free_port()
    command = adapter.command(spec, host=LOCALHOST, port=port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    on_status(f"starting {adapter.name} on {LOCALHOST}:{port}")
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **spec.env},
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    engine = RunningEngine(adapter, spec, f"http://{LOCALHOST}:{port}", command, process, log_path)
    try:
        _wait_ready(engine, spec.startup_timeout_s)
    except BaseException:
        engine.stop(grace_s=2.0)
        raise
    on_status(f"{adapter.name} ready at {engine.url}")
    return engine


@contextlib.contextmanager
def engine_running(
    spec: EngineSpec,
    *,
    log_path: Path,
    on_status: Callable[[str], None] = lambda _msg: None,
) -> Iterator[RunningEngine]:
    """Launch for the duration of a `with` block; always stopped on the way out."""
    engine = launch_engine(spec, log_path=log_path, on_status=on_status)
    try:
        yield engine
    finally:
        engine.stop()


def _wait_ready(engine: RunningEngine, timeout_s: float) -> None:
    url = engine.url + engine.adapter.health_path
    deadline = time.monotonic() + timeout_s
    while True:
        code = engine.process.poll()
        if code is not None:
            tail = _log_tail(engine.log_path)
            raise EngineLaunchError(
                f"{engine.adapter.name} exited with code {code} while starting",
                log_path=str(engine.log_path),
                log_tail=tail,
            )
        if _healthy(url):
            return
        if time.monotonic() > deadline:
            raise EngineLaunchError(
                f"{engine.adapter.name} was not ready after {timeout_s:g} s",
                log_path=str(engine.log_path),
                log_tail=_log_tail(engine.log_path),
            )
        time.sleep(_POLL_S)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def _die_with_parent() -> None:
    """In the child: ask the kernel for SIGTERM when servelab exits (prctl PR_SET_PDEATHSIG)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    pgid = process.pid
    _signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_alive(pgid) or process.poll() is None:
        _signal_group(pgid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 5.0
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
