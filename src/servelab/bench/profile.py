"""A torch profile of one load level, taken without putting the level at risk.

Once the level's measured requests start, the engine's profiler is started, left on for a
bounded window (seconds, and a step count where the engine takes one), and stopped with a
request nobody waits for (vLLM's stop may not answer for minutes). After the level the
trace files are polled until each has stopped growing, with a timeout and progress; a
profiler that fails or never writes is a note on the level, never a lost measurement.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.engines.profiler import PROFILE_STEPS, ProfilerSupport

__all__ = [
    "DEFAULT_FILES_TIMEOUT_S",
    "DEFAULT_WINDOW_S",
    "ProfileOutcome",
    "ProfilePlan",
    "ProfileWindow",
]

DEFAULT_WINDOW_S = 3.0
DEFAULT_FILES_TIMEOUT_S = 600.0
_REQUEST_TIMEOUT_S = 30.0
_STABLE_S = 3.0
_POLL_S = 0.5


@dataclass(frozen=True)
class ProfilePlan:
    """Which level to profile, for how long, and where the engine writes."""

    level: float
    folder: Path
    window_s: float = DEFAULT_WINDOW_S
    steps: int = PROFILE_STEPS
    files_timeout_s: float = DEFAULT_FILES_TIMEOUT_S
    support: ProfilerSupport | None = None
    url: str | None = None


class ProfileOutcome(BaseModel):
    """profile.json: what the profiler did, and the trace files it left."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    level: float
    status: Literal["complete", "no files", "incomplete", "failed"]
    detail: str
    window_s: float
    started_s: float | None = Field(description="Seconds into the measured level.")
    files: list[str] = Field(default_factory=list, description="Relative to the run folder.")
    bytes: int = 0
    waited_s: float = Field(description="From the window's end until the files were complete.")


class ProfileWindow:
    """Start, hold and stop the profiler on a thread; `finish` waits for the files."""

    def __init__(self, plan: ProfilePlan, on_notice: Callable[[str], None]) -> None:
        if plan.support is None or plan.url is None:
            raise ValueError("a profile needs the engine's profiler and URL")
        self.plan = plan
        self.support: ProfilerSupport = plan.support
        self.on_notice = on_notice
        self.error: str | None = None
        self.started_s: float | None = None
        self._began = time.monotonic()
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None

    def begin(self) -> None:
        """Called when the level's measured requests start."""
        self.plan.folder.mkdir(parents=True, exist_ok=True)
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._hold, name="torch-profile", daemon=True)
        self._thread.start()

    def finish(self, run_folder: Path) -> ProfileOutcome:
        """After the level: the window closed, then the files complete (or the timeout)."""
        if self._thread is None:
            return self._outcome(run_folder, "failed", "the level ended before it was profiled", 0)
        self._ended.wait(self.plan.window_s + 2 * _REQUEST_TIMEOUT_S)
        if self.error is not None:
            return self._outcome(run_folder, "failed", self.error, 0)
        waited_from = time.monotonic()
        status, detail = self._wait_for_files()
        return self._outcome(run_folder, status, detail, time.monotonic() - waited_from)

    def _hold(self) -> None:
        plan = self.plan
        try:
            body = self.support.start_body(plan.folder, plan.steps)
            _post(plan.url or "", self.support.start_path, body, timeout_s=_REQUEST_TIMEOUT_S)
            self.started_s = time.monotonic() - self._began
            self.on_notice(f"torch profile: on for {plan.window_s:g} s")
            time.sleep(plan.window_s)
            threading.Thread(target=self._stop, name="torch-profile-stop", daemon=True).start()
        except OSError as exc:
            self.error = f"the profiler did not start: {_reason(exc)}"
        finally:
            self._ended.set()

    def _stop(self) -> None:
        """The stop request, which may not answer for minutes: nobody waits on it."""
        try:
            _post(self.plan.url or "", self.support.stop_path, None, timeout_s=3600)
        except OSError:
            return

    def _wait_for_files(self) -> tuple[Literal["complete", "no files", "incomplete"], str]:
        deadline = time.monotonic() + self.plan.files_timeout_s
        sizes: dict[Path, tuple[int, float]] = {}
        said = time.monotonic()
        while time.monotonic() < deadline:
            now = time.monotonic()
            files = self._files()
            for path in files:
                size = path.stat().st_size
                if path not in sizes or sizes[path][0] != size:
                    sizes[path] = (size, now)
            steady = [p for p in files if now - sizes[p][1] >= _STABLE_S and sizes[p][0] > 0]
            if files and len(steady) == len(files) and self._engine_done(files):
                return "complete", f"{len(files)} trace files"
            if now - said >= 10:
                total = sum(size for size, _ in sizes.values())
                self.on_notice(
                    f"torch profile: waiting for the engine's trace files "
                    f"({len(files)} so far, {total / 1e6:,.1f} MB)"
                )
                said = now
            time.sleep(_POLL_S)
        if not self._files():
            return "no files", f"no trace file in {self.plan.files_timeout_s:g} s"
        return "incomplete", f"files still growing after {self.plan.files_timeout_s:g} s"

    def _engine_done(self, files: list[Path]) -> bool:
        """vLLM writes its rank trace and its front end's separately; wait for the rank's."""
        if self.support.engine != "vllm":
            return True
        return any("rank" in p.name for p in files)

    def _files(self) -> list[Path]:
        found = {p for pattern in self.support.patterns for p in self.plan.folder.glob(pattern)}
        return sorted(p for p in found if p.is_file() and not p.name.endswith(".tmp"))

    def _outcome(
        self, run_folder: Path, status: str, detail: str, waited_s: float
    ) -> ProfileOutcome:
        files = self._files() if status != "failed" else []
        return ProfileOutcome(
            engine=self.support.engine,
            level=self.plan.level,
            status=status,  # type: ignore[arg-type]
            detail=detail,
            window_s=self.plan.window_s,
            started_s=self.started_s,
            files=[_relative(p, run_folder) for p in files],
            bytes=sum(p.stat().st_size for p in files),
            waited_s=round(waited_s, 3),
        )


def _post(base: str, path: str, body: dict[str, object] | None, *, timeout_s: float) -> None:
    import json

    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(
        base.rstrip("/") + path,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


def _reason(exc: OSError) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} from the engine (was it launched with its profiler on?)"
    return str(getattr(exc, "reason", exc))


def _relative(path: Path, folder: Path) -> str:
    try:
        return str(path.resolve().relative_to(folder.resolve()))
    except ValueError:
        return str(path)
