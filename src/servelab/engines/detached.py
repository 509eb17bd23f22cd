"""Engines that outlive the command that started them: `engine up`, `down`, `list`, `logs`.

`up` starts a supervisor (`servelab.engines.supervisor`) in a session of its own; the
supervisor launches the engine, stamps its log, and stops it on SIGTERM. `up` returns
once the engine is ready and records it in the state file (`state`). `down` asks the
supervisor to stop the engine, then makes sure: whatever is left of the engine's
process group after the grace period is killed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from servelab.core.errors import ConfigError, EngineLaunchError, Interrupted
from servelab.core.redact import is_secret_name, redact_argv
from servelab.engines.base import EngineSpec
from servelab.engines.enginelog import log_tail
from servelab.engines.launcher import DEFAULT_STOP_GRACE_S, LOCALHOST, free_port
from servelab.engines.registry import get_adapter
from servelab.engines.state import (
    EngineRecord,
    ProcessId,
    engine_dir,
    group_alive,
    load_records,
    remove_record,
    save_record,
    signal_group,
)
from servelab.engines.supervisor import (
    LOG_FILE,
    LOG_PATH_KEY,
    SECRET_ENV_KEY,
    SPEC_FILE,
    read_status,
)

__all__ = [
    "StopResult",
    "drop_stale_records",
    "engine_down",
    "engine_up",
    "follow_log",
    "log_path_of",
    "running_engines",
]

_POLL_S = 0.1
_STOP_MARGIN_S = 30.0
"""Beyond the grace period: the supervisor's SIGKILL round and its GPU memory check."""
_SUPERVISOR_LOG = "supervisor.log"


class StopResult(BaseModel):
    """What `engine_down` did to one engine."""

    name: str
    was_running: bool
    killed: bool
    """True when something had to be SIGKILLed after the supervisor's stop."""
    gpu_memory_released: bool | None = None
    gpu_memory_detail: str = "n/a"


def engine_up(
    spec: EngineSpec,
    *,
    name: str | None = None,
    log_path: Path | None = None,
    on_status: Callable[[str], None] = lambda _msg: None,
) -> EngineRecord:
    """Start the engine detached, wait until it is ready, and record it."""
    adapter = get_adapter(spec.engine)
    if not adapter.launches:
        raise ConfigError(f"engine {adapter.name!r} is attached by URL; there is nothing to start")
    drop_stale_records()  # so a dead engine's name can be reused
    port = spec.port or free_port(spec.host or LOCALHOST)
    spec = spec.model_copy(update={"port": port})
    name = name or f"{adapter.name}-{port}"
    folder = engine_dir(name)
    if name in load_records():
        raise ConfigError(
            f"an engine named {name!r} is running", hint=f"servelab engine down {name}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    log = log_path.resolve() if log_path else folder / LOG_FILE
    for stale in (folder / "status.json", folder / LOG_FILE, folder / _SUPERVISOR_LOG):
        stale.unlink(missing_ok=True)
    secret_env = {k: v for k, v in spec.env.items() if is_secret_name(k)}
    public = spec.model_copy(
        update={"env": {k: v for k, v in spec.env.items() if k not in secret_env}}
    )
    envelope = {
        "spec": public.model_dump(mode="json"),
        LOG_PATH_KEY: str(log),
        SECRET_ENV_KEY: sorted(secret_env),
    }
    (folder / SPEC_FILE).write_text(json.dumps(envelope, indent=2) + "\n")
    on_status(f"starting {adapter.name} as {name!r}")
    with (folder / _SUPERVISOR_LOG).open("ab") as output:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "servelab.engines.supervisor", str(folder)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **secret_env},
            start_new_session=True,
        )
    try:
        status = _wait_for_report(supervisor, folder, spec.startup_timeout_s + _STOP_MARGIN_S)
    except KeyboardInterrupt:
        _stop_supervisor(supervisor, folder)
        raise Interrupted("interrupted while the engine was starting; it was stopped") from None
    record = EngineRecord(
        name=name,
        engine=adapter.name,
        url=status["url"],
        command=redact_argv(status["command"]),
        engine_process=ProcessId.of(status["pid"]),
        supervisor=ProcessId.of(supervisor.pid),
        log_path=str(log),
        started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    save_record(record)
    return record


def engine_down(name: str, *, grace_s: float = DEFAULT_STOP_GRACE_S) -> StopResult:
    """Stop the engine called `name` and its whole process group; forget it."""
    record = load_records().get(name)
    if record is None:
        raise ConfigError(f"no engine named {name!r} is recorded", hint=_known_names())
    was_running = record.running()
    killed = False
    if record.supervisor.alive():
        signal_group(record.supervisor.pid, signal.SIGTERM)
        killed = not _wait(lambda: not record.supervisor.alive(), grace_s + _STOP_MARGIN_S)
    elif record.running():
        record.terminate_group()
        _wait(lambda: not record.running(), grace_s)
    if record.running():
        killed = True
        record.kill()
        _wait(lambda: not record.running(), 5.0)
    remove_record(name)
    status = read_status(engine_dir(name)) or {}
    return StopResult(
        name=name,
        was_running=was_running,
        killed=killed,
        gpu_memory_released=status.get("gpu_memory_released"),
        gpu_memory_detail=status.get("gpu_memory_detail") or "n/a: not reported",
    )


def running_engines() -> tuple[list[EngineRecord], list[str]]:
    """The recorded engines still running, and the names of stale entries just removed."""
    live: list[EngineRecord] = []
    stale: list[str] = []
    for name, record in load_records().items():
        if record.running():
            live.append(record)
        else:
            remove_record(name)
            stale.append(name)
    return live, stale


def drop_stale_records() -> None:
    """Remove the records of engines no longer running."""
    for name, record in load_records().items():
        if not record.running():
            remove_record(name)


def log_path_of(name: str) -> Path:
    """The log of the engine called `name`, recorded or stopped (its folder is kept)."""
    record = load_records().get(name)
    path = Path(record.log_path) if record else engine_dir(name) / LOG_FILE
    if not path.exists():
        raise ConfigError(f"no log for an engine named {name!r}", hint=_known_names())
    return path


def follow_log(path: Path, *, until: Callable[[], bool], poll_s: float = 0.25) -> Iterator[str]:
    """The log's lines from the start, then new ones as they come, until `until()` is true."""
    with path.open(encoding="utf-8", errors="replace") as log:
        pending = ""
        while True:
            chunk = log.read()
            if chunk:
                pending += chunk
                *lines, pending = pending.split("\n")
                yield from lines
                continue
            if until():
                if pending:
                    yield pending
                return
            time.sleep(poll_s)


def _wait_for_report(
    supervisor: subprocess.Popen[bytes], folder: Path, timeout_s: float
) -> dict[str, Any]:
    """The supervisor's `ready` report; its failure becomes an EngineLaunchError."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = read_status(folder)
        state = status and status.get("state")
        if state == "ready":
            assert status is not None
            return status
        if state in ("failed", "stopped", "exited") or supervisor.poll() is not None:
            supervisor.wait()
            raise _launch_error(read_status(folder), folder)
        if time.monotonic() > deadline:
            _stop_supervisor(supervisor, folder)
            raise EngineLaunchError(
                f"the engine did not report ready in {timeout_s:g} s",
                log_path=str(folder / LOG_FILE),
            )
        time.sleep(_POLL_S)


def _launch_error(status: dict[str, Any] | None, folder: Path) -> EngineLaunchError:
    if status and status.get("state") == "failed":
        return EngineLaunchError(
            status.get("message") or "the engine failed to start",
            log_path=status.get("log_path"),
            log_tail=status.get("log_tail") or [],
        )
    log = folder / _SUPERVISOR_LOG
    return EngineLaunchError(
        "the engine's supervisor exited before the engine was ready",
        log_path=str(log),
        log_tail=log_tail(log, 10),
    )


def _stop_supervisor(supervisor: subprocess.Popen[bytes], folder: Path) -> None:
    """SIGTERM makes it stop the engine; SIGKILL if it does not finish in time."""
    supervisor.terminate()
    try:
        supervisor.wait(timeout=DEFAULT_STOP_GRACE_S + _STOP_MARGIN_S)
    except subprocess.TimeoutExpired:
        supervisor.kill()
        supervisor.wait()
    status = read_status(folder) or {}
    if isinstance(status.get("pid"), int) and group_alive(status["pid"]):
        signal_group(status["pid"], signal.SIGKILL)


def _wait(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)
    return True


def _known_names() -> str:
    names = sorted(load_records())
    return f"running: {', '.join(names)}" if names else "none is running"
