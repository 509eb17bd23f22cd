"""The process that keeps a detached engine: `python -m servelab.engines.supervisor DIR`.

`servelab engine up` starts it in a session of its own and returns once it reports the
engine ready. It launches the engine from DIR/spec.json with the ordinary launcher (so
engine.log is stamped line by line), reports through DIR/status.json, and then waits:
when the engine exits it records the exit; on SIGTERM (`servelab engine down`) it stops
the engine's process group, checks the GPU memory came back, and records that.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from servelab.core.errors import ServelabError
from servelab.core.redact import redact_argv
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import launch_engine

__all__ = ["LOG_FILE", "SPEC_FILE", "STATUS_FILE", "main", "read_status"]

SPEC_FILE = "spec.json"
STATUS_FILE = "status.json"
LOG_FILE = "engine.log"
LOG_PATH_KEY = "log_path"
"""Optional key of spec.json's envelope: where engine.log goes instead of DIR/engine.log."""
SECRET_ENV_KEY = "secret_env"
"""Optional key of spec.json's envelope: names of spec env variables kept out of the file;
their values reach the supervisor through its own environment."""


class _Terminated(BaseException):
    """SIGTERM arrived: unwind whatever is running (the readiness wait too) and stop."""


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv or sys.argv[1:])[0])
    envelope = json.loads((folder / SPEC_FILE).read_text())
    spec = EngineSpec.model_validate(envelope["spec"])
    secret_env = {name: os.environ[name] for name in envelope.get(SECRET_ENV_KEY, [])}
    spec = spec.model_copy(update={"env": {**spec.env, **secret_env}})
    log_path = Path(envelope.get(LOG_PATH_KEY) or folder / LOG_FILE)
    signal.signal(signal.SIGTERM, _raise_terminated)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        engine = launch_engine(spec, log_path=log_path)
    except _Terminated:
        _write(folder, state="stopped", message="stopped while starting")
        return 0
    except ServelabError as exc:
        _write(
            folder,
            state="failed",
            message=str(exc),
            error=type(exc).__name__,
            log_path=getattr(exc, "log_path", None),
            log_tail=getattr(exc, "log_tail", []),
        )
        return 5
    _write(
        folder,
        state="ready",
        url=engine.url,
        pid=engine.pid,
        command=redact_argv(engine.command),
        log_path=str(log_path),
    )
    try:
        code = engine.process.wait()
        state = "exited"
    except _Terminated:
        code = None
        state = "stopped"
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    engine.stop()
    _write(
        folder,
        state=state,
        url=engine.url,
        pid=engine.pid,
        exit_code=code if code is not None else engine.process.returncode,
        gpu_memory_released=engine.gpu_memory_released,
        gpu_memory_detail=engine.gpu_memory_detail,
    )
    return 0


def read_status(folder: Path) -> dict[str, Any] | None:
    """The supervisor's last report, or None before its first."""
    try:
        status: dict[str, Any] = json.loads((folder / STATUS_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return status


def _raise_terminated(_signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the stop short
    raise _Terminated


def _write(folder: Path, **status: Any) -> None:
    status["at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    partial = folder / (STATUS_FILE + ".tmp")
    partial.write_text(json.dumps(status, indent=2) + "\n")
    os.replace(partial, folder / STATUS_FILE)


if __name__ == "__main__":
    sys.exit(main())
