"""The engines `servelab engine up` left running, recorded in a state file.

`$SERVELAB_STATE/engines.json`, else `$XDG_STATE_HOME/servelab/engines.json`, else
`~/.local/state/servelab/engines.json`; beside it `engines/<name>/` holds each engine's
spec, status and log, kept after `down` so its log can still be read. Every change to
the file is made under an exclusive lock. A process is recognised by its pid and its
start time (/proc/<pid>/stat), so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from servelab.core.errors import ConfigError
from servelab.core.processes import group_alive, proc_stat, signal_group

__all__ = [
    "STATE_ENV",
    "EngineRecord",
    "ProcessId",
    "engine_dir",
    "group_alive",
    "load_records",
    "remove_record",
    "save_record",
    "signal_group",
    "state_dir",
]

STATE_ENV = "SERVELAB_STATE"

_STATE_FILE = "engines.json"


class ProcessId(BaseModel):
    """A process as it was when recorded: its pid and its start time in clock ticks."""

    pid: int
    start_ticks: int | None = None

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        return cls(pid=pid, start_ticks=_start_ticks(pid))

    def alive(self) -> bool:
        """Running, and the same process (not a later one given the same pid)."""
        ticks = _start_ticks(self.pid)
        return ticks is not None and (self.start_ticks is None or ticks == self.start_ticks)


class EngineRecord(BaseModel):
    """One detached engine: who runs it, where it answers, where it logs."""

    name: str
    engine: str
    url: str
    command: list[str]
    engine_process: ProcessId = Field(description="The engine; it leads its process group.")
    supervisor: ProcessId = Field(description="servelab's process that writes engine.log.")
    log_path: str
    started_at: str = Field(description="UTC, ISO 8601.")

    @property
    def pgid(self) -> int:
        return self.engine_process.pid

    def running(self) -> bool:
        """Whether anything of the engine or its supervisor is left."""
        return (
            self.supervisor.alive()
            or self.engine_process.alive()
            or (self._leader_gone_or_ours() and group_alive(self.pgid))
        )

    def kill(self) -> None:
        """SIGKILL the supervisor and the engine's process group, where they are still ours."""
        if self.supervisor.alive():
            signal_group(self.supervisor.pid, signal.SIGKILL)
        if self._leader_gone_or_ours():
            signal_group(self.pgid, signal.SIGKILL)

    def terminate_group(self) -> None:
        """SIGTERM the engine's process group, where it is still ours."""
        if self._leader_gone_or_ours():
            signal_group(self.pgid, signal.SIGTERM)

    def _leader_gone_or_ours(self) -> bool:
        """A group id stays taken while any member lives; a new leader is someone else's."""
        return self.engine_process.alive() or _start_ticks(self.pgid) is None


def state_dir() -> Path:
    """Where the state file and the engines' folders live."""
    if explicit := os.environ.get(STATE_ENV):
        return Path(explicit)
    if xdg := os.environ.get("XDG_STATE_HOME"):
        return Path(xdg) / "servelab"
    return Path.home() / ".local" / "state" / "servelab"


def engine_dir(name: str) -> Path:
    """The folder of the engine called `name` (spec.json, status.json, engine.log)."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"engine name {name!r} must be a plain word (no '/', no leading '.')")
    return state_dir() / "engines" / name


def load_records() -> dict[str, EngineRecord]:
    """Every recorded engine by name, running or not."""
    with _locked() as records:
        return records


def save_record(record: EngineRecord) -> None:
    with _locked() as records:
        records[record.name] = record
        _write(records)


def remove_record(name: str) -> None:
    with _locked() as records:
        if records.pop(name, None) is not None:
            _write(records)


@contextlib.contextmanager
def _locked() -> Iterator[dict[str, EngineRecord]]:
    folder = state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / (_STATE_FILE + ".lock")).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield _read(folder / _STATE_FILE)


def _read(path: Path) -> dict[str, EngineRecord]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read the engine state file {path}: {exc}") from None
    return {name: EngineRecord.model_validate(r) for name, r in document["engines"].items()}


def _write(records: dict[str, EngineRecord]) -> None:
    path = state_dir() / _STATE_FILE
    document = {"engines": {name: r.model_dump(mode="json") for name, r in records.items()}}
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(partial, path)


def _start_ticks(pid: int) -> int | None:
    """The process's start time (ProcStat.start_ticks); None if it is gone."""
    stat = proc_stat(pid)
    if stat is None or stat.state == "Z":
        return None  # a zombie has exited; only its exit status is left
    return stat.start_ticks
