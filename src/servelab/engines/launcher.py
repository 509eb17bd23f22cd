"""Starts an engine as a child process and stops it with nothing left behind.

The child inherits servelab's environment with the spec's `env` on top, gets its own
process group (so every process it forks can be signalled at once), and listens on the
spec's host and port (default 127.0.0.1 and a free port). Its stdout and stderr go
through a reader thread into `engine.log`, every line stamped (`enginelog`), and to an
optional `on_line` hook. It is ready when its health URL answers 200 and then, for
engines that list models, /v1/models does too. Stopping sends SIGTERM to the group,
then SIGKILL after a grace period, and waits until the group is empty; on a GPU it then
checks through NVML that the engine's memory was given back. On Linux the child also
receives SIGTERM if servelab itself dies.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.core.errors import EngineLaunchError
from servelab.core.net import LOCALHOST, check_can_listen, free_port, port_free, url_host
from servelab.core.processes import (
    group_alive,
    request_parent_death_signal,
    session_members,
    signal_group,
)
from servelab.core.redact import is_secret_name, redact_argv, register_secret
from servelab.engines.base import EngineAdapter, EngineSpec, SettlesAfterStart
from servelab.engines.enginelog import LogPump, log_tail
from servelab.engines.gpu import DEFAULT_GPU_RELEASE_TIMEOUT_S, GpuWatch
from servelab.engines.registry import get_adapter

__all__ = [
    "DEFAULT_STOP_GRACE_S",
    "LAUNCH_NOTE_LINES",
    "LOCALHOST",
    "RunningEngine",
    "engine_running",
    "free_port",
    "launch_engine",
    "url_host",
]

DEFAULT_STOP_GRACE_S = 10.0
LAUNCH_NOTE_LINES = 1
"""Lines the launcher writes into engine.log before the engine's first (the launch command)."""
_POLL_S = 0.25
_LOG_TAIL_LINES = 20
_TERM_WITH_SERVELAB = functools.partial(request_parent_death_signal, signal.SIGTERM)
"""In the child before exec: SIGTERM when servelab exits, so the engine can stop cleanly."""


@dataclass
class RunningEngine:
    """An engine process that answered its readiness checks."""

    adapter: EngineAdapter
    spec: EngineSpec
    url: str
    command: list[str]
    process: subprocess.Popen[bytes]
    log_path: Path
    gpu_memory_released: bool | None = None
    """After `stop`: True when NVML no longer lists the engine's processes, False when it
    still does, None when not checked (no NVML here, or not stopped yet)."""
    gpu_memory_detail: str = "n/a: not stopped yet"
    """What was held and when it was released, or why it was not checked."""
    settled: dict[str, Any] = field(default_factory=dict)
    """What the adapter adjusted once the engine answered (its CPU share), for the run."""
    _pump: LogPump | None = field(default=None, repr=False)
    _gpus: GpuWatch | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def pgid(self) -> int:
        """The engine's process group: its own pid (it leads a new session)."""
        return self.process.pid

    def stop(
        self,
        *,
        grace_s: float = DEFAULT_STOP_GRACE_S,
        gpu_timeout_s: float = DEFAULT_GPU_RELEASE_TIMEOUT_S,
    ) -> None:
        """SIGTERM the process group, SIGKILL what remains after `grace_s`, wait for all;
        then record whether the GPU memory came back within `gpu_timeout_s`."""
        if self._gpus is not None:
            self._gpus.observe(self.pgid)
        _stop_group(self.process, grace_s)
        if self._pump is not None:
            # The group is gone: let the reader copy its last lines before servelab's note
            # of the exit, so the log ends with it (bounded: a stray holder of the pipe).
            self._pump.join(timeout=DRAIN_TIMEOUT_S)
            self._pump.note(f"engine exited with code {self.process.returncode}")
            self._pump.close()
            self._pump = None
        if self._gpus is not None:
            self.gpu_memory_released, self.gpu_memory_detail = self._gpus.released(
                timeout_s=gpu_timeout_s
            )
            self._gpus.close()
            self._gpus = None


DRAIN_TIMEOUT_S = 2.0


def launch_engine(
    spec: EngineSpec,
    *,
    log_path: Path,
    port: int | None = None,
    on_status: Callable[[str], None] = lambda _msg: None,
    on_line: Callable[[str], None] | None = None,
) -> RunningEngine:
    """Prepare, start and wait for the engine; raise EngineLaunchError if it dies or stalls.

    `on_line` gets every line the engine prints, without its stamp, on the reader thread.
    """
    adapter = get_adapter(spec.engine)
    if not adapter.launches:
        raise EngineLaunchError(f"engine {adapter.name!r} is attached by URL, not launched")
    on_status(f"preparing {adapter.name}")
    spec = adapter.prepare(spec)
    host = spec.host or LOCALHOST
    port = port or spec.port
    if port is None:
        port = free_port(host)
    elif not port_free(host, port):
        check_can_listen(host)  # a host that cannot be listened on at all says so first
        raise EngineLaunchError(f"cannot start {adapter.name}: port {port} on {host} is in use")
    command = adapter.command(spec, host=host, port=port)
    _register_secrets(spec, command)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    gpus, no_gpu = GpuWatch.open()
    on_status(f"starting {adapter.name} on {host}:{port}")
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **spec.env},
            start_new_session=True,
            preexec_fn=_TERM_WITH_SERVELAB if sys.platform == "linux" else None,
        )
    except OSError as exc:
        if gpus is not None:
            gpus.close()
        raise EngineLaunchError(
            f"cannot start {adapter.name}: {command[0]}: {exc.strerror}", log_path=str(log_path)
        ) from None
    assert process.stdout is not None
    pump = LogPump(process.stdout, log_path, on_line)
    pump.note(f"launching {shlex.join(redact_argv(command))}")
    pump.start()
    engine = RunningEngine(
        adapter,
        spec,
        f"http://{url_host(host)}:{port}",
        command,
        process,
        log_path,
        gpu_memory_detail=f"n/a: {no_gpu}" if no_gpu else "n/a: not stopped yet",
        _pump=pump,
        _gpus=gpus,
    )
    try:
        _wait_ready(engine, spec.startup_timeout_s)
    except BaseException:
        engine.stop(grace_s=2.0)
        raise
    if gpus is not None:
        gpus.observe(engine.pgid)
    if isinstance(adapter, SettlesAfterStart):
        engine.settled = adapter.settle(spec, engine.pgid)
    on_status(f"{adapter.name} ready at {engine.url}")
    return engine


@contextlib.contextmanager
def engine_running(
    spec: EngineSpec,
    *,
    log_path: Path,
    on_status: Callable[[str], None] = lambda _msg: None,
    on_line: Callable[[str], None] | None = None,
) -> Iterator[RunningEngine]:
    """Launch for the duration of a `with` block; always stopped on the way out."""
    engine = launch_engine(spec, log_path=log_path, on_status=on_status, on_line=on_line)
    try:
        yield engine
    finally:
        engine.stop()


def _wait_ready(engine: RunningEngine, timeout_s: float) -> None:
    """/health, then /v1/models where the engine has it, each answering 200."""
    paths = [engine.adapter.health_path]
    models_path: str | None = getattr(engine.adapter, "models_path", None)
    if models_path and models_path != engine.adapter.health_path:
        paths.append(models_path)
    deadline = time.monotonic() + timeout_s
    while paths:
        code = engine.process.poll()
        if code is not None:
            raise EngineLaunchError(
                f"{engine.adapter.name} exited with code {code} while starting",
                log_path=str(engine.log_path),
                log_tail=_settled_tail(engine),
            )
        if _answers(engine.url + paths[0]):
            paths.pop(0)
            continue
        if time.monotonic() > deadline:
            waiting = "" if paths[0] == engine.adapter.health_path else f" ({paths[0]})"
            raise EngineLaunchError(
                f"{engine.adapter.name} was not ready after {timeout_s:g} s{waiting}",
                log_path=str(engine.log_path),
                log_tail=log_tail(engine.log_path, _LOG_TAIL_LINES),
            )
        time.sleep(_POLL_S)


def _settled_tail(engine: RunningEngine) -> list[str]:
    """The log's tail once the reader has written everything the dead engine printed."""
    if engine._pump is not None:
        engine._pump.join(timeout=2.0)
    return log_tail(engine.log_path, _LOG_TAIL_LINES)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _register_secrets(spec: EngineSpec, command: list[str]) -> None:
    """Secret env values and secret option values are scrubbed from all that is written."""
    for name, value in spec.env.items():
        if is_secret_name(name):
            register_secret(value)
    for arg, masked in zip(command, redact_argv(command), strict=True):
        if arg != masked:
            register_secret(arg.split("=", 1)[1] if "=" in arg else arg)


def _stop_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    pgid = process.pid
    signal_group(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_alive(pgid) or process.poll() is None:
        signal_group(pgid, signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 5.0
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
    _stop_session(pgid, grace_s)


def _stop_session(sid: int, grace_s: float) -> None:
    """What left the group but not the session (a child that made a group of its own):
    SIGTERM, then SIGKILL after `grace_s`. The engine leads its session, so its pid is the
    session's id, and nothing outside the engine shares it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        members = session_members(sid)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig is signal.SIGTERM else 5.0)
        while members and time.monotonic() < deadline:
            time.sleep(0.05)
            members = session_members(sid)
        if not members:
            return
