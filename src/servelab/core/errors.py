"""The errors a servelab user can hit, each carrying the context needed to act on it.

```
ServelabError
├── ConfigError              bad option values, specs or files (usage error)
├── EndpointError            an endpoint we cannot benchmark
│   ├── EndpointUnreachable  nothing answers at the URL
│   └── EndpointRejected     it answers, but refuses every request we can make
├── EngineLaunchError        an engine died or never became ready while starting
├── EngineNotServing         an engine started, but its log says why it cannot serve
├── EngineSetupError         an engine's prerequisites are missing (extras, model files)
└── Interrupted              Ctrl-C; partial results were kept
```

Library code raises these; `servelab.cli` maps each class to an exit code and prints
one line. Per-request failures are never exceptions: they are recorded as data.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EndpointError",
    "EndpointRejected",
    "EndpointUnreachable",
    "EngineLaunchError",
    "EngineNotServing",
    "EngineSetupError",
    "Interrupted",
    "ServelabError",
]


class ServelabError(Exception):
    """Base of every error servelab raises on purpose."""


class ConfigError(ServelabError):
    """An option, spec or input file is invalid; `hint` says what would be valid."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message if hint is None else f"{message} ({hint})")
        self.hint = hint


class EndpointError(ServelabError):
    """An endpoint cannot be benchmarked."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class EndpointUnreachable(EndpointError):
    """Nothing answered at `url` (connection refused, DNS failure, timeout)."""


class EndpointRejected(EndpointError):
    """The endpoint answered but rejected the request; `status` and `body` say how."""

    def __init__(self, message: str, *, url: str, status: int, body: str) -> None:
        super().__init__(message, url=url)
        self.status = status
        self.body = body


class EngineLaunchError(ServelabError):
    """The engine process exited or never became ready; `log_tail` holds its last lines."""

    def __init__(
        self, message: str, *, log_path: str | None = None, log_tail: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail or []
        self.findings: list[str] = []
        """Known log signatures that explain the failure, each with what to try."""


class EngineNotServing(ServelabError):
    """The engine answered its health check but refused the first request, and its log (or
    its answer) names why: a worker that died sizing its cache, say."""

    def __init__(self, message: str, *, log_path: str | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


class EngineSetupError(ServelabError):
    """An engine cannot be prepared here (a missing extra, an unknown preset)."""


class EngineDied(ServelabError):
    """The engine servelab launched exited during the run; finished levels are kept."""

    def __init__(
        self,
        message: str,
        *,
        exit_code: int,
        during: str,
        run_dir: str | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.during = during
        self.run_dir = run_dir


class Interrupted(ServelabError):
    """The user pressed Ctrl-C; what was measured is saved under `run_dir`."""

    def __init__(self, message: str, *, run_dir: str | None = None) -> None:
        super().__init__(message)
        self.run_dir = run_dir
