"""Exit codes of every servelab command, and the one place errors become them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from enum import IntEnum

import typer
from rich.console import Console
from rich.markup import escape

from servelab.cli.signals import interrupt_exit_code, stop_signals_interrupt
from servelab.core.errors import (
    ConfigError,
    EndpointError,
    EngineDied,
    EngineLaunchError,
    EngineNotServing,
    EngineSetupError,
    Interrupted,
    ServelabError,
)

__all__ = ["ExitCode", "exit_for_levels", "handle_errors"]


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1
    """A bug in servelab: one line, and SERVELAB_DEBUG=1 shows the traceback."""
    USAGE = 2
    """Bad options or input files."""
    SOME_FAILED = 3
    """The run finished but some requests failed."""
    NOTHING_SUCCEEDED = 4
    """No request succeeded, or the endpoint is unreachable or rejects every request."""
    ENGINE_FAILED = 5
    """The engine could not be prepared or did not start."""
    ENGINE_DIED = 6
    """The engine servelab launched died during the run; finished levels were kept."""
    HANGUP = 129
    """SIGHUP; partial results were kept."""
    INTERRUPTED = 130
    """Ctrl-C; partial results were kept."""
    TERMINATED = 143
    """SIGTERM (timeout, systemd, Kubernetes); partial results were kept."""


def exit_for_levels(completed: int, failed: int) -> ExitCode:
    """The code for a finished run with these totals."""
    if completed == 0:
        return ExitCode.NOTHING_SUCCEEDED
    return ExitCode.SOME_FAILED if failed else ExitCode.OK


@contextlib.contextmanager
def handle_errors(err: Console) -> Iterator[None]:
    """Turn servelab's errors (and Ctrl-C, SIGTERM, SIGHUP) into one line and an exit code."""
    try:
        with stop_signals_interrupt():
            yield
    except typer.Exit:
        raise
    except ConfigError as exc:
        _fail(err, f"error: {exc}", ExitCode.USAGE)
    except EndpointError as exc:
        _fail(err, f"error: {exc}", ExitCode.NOTHING_SUCCEEDED)
    except EngineLaunchError as exc:
        lines = [f"error: {exc}"]
        if exc.log_tail:
            lines.append("last lines of the engine log:")
            lines += [f"  {line}" for line in exc.log_tail[-10:]]
        if exc.findings:
            lines.append("what the log says:")
            lines += [f"  {finding}" for finding in exc.findings[:8]]
        if exc.log_path:
            lines.append(f"full log: {exc.log_path}")
        _fail(err, "\n".join(lines), ExitCode.ENGINE_FAILED)
    except EngineNotServing as exc:
        where = f" (full log: {exc.log_path})" if exc.log_path else ""
        _fail(err, f"error: {exc}{where}", ExitCode.ENGINE_FAILED)
    except EngineSetupError as exc:
        _fail(err, f"error: {exc}", ExitCode.ENGINE_FAILED)
    except EngineDied as exc:
        where = f"; finished levels are in {exc.run_dir}" if exc.run_dir else ""
        _fail(err, f"error: {exc}{where}", ExitCode.ENGINE_DIED)
    except Interrupted as exc:
        where = f"; partial results are in {exc.run_dir}" if exc.run_dir else ""
        _fail(err, f"interrupted{where}", ExitCode(interrupt_exit_code()))
    except KeyboardInterrupt:
        _fail(err, "interrupted", ExitCode(interrupt_exit_code()))
    except ServelabError as exc:
        _fail(err, f"error: {exc}", ExitCode.INTERNAL)
    except Exception as exc:
        if os.environ.get("SERVELAB_DEBUG"):
            raise
        _fail(
            err,
            f"internal error: {type(exc).__name__}: {exc} (set SERVELAB_DEBUG=1 for a traceback)",
            ExitCode.INTERNAL,
        )


def _fail(err: Console, message: str, code: ExitCode) -> None:
    err.print(escape(message), highlight=False, soft_wrap=True)
    raise typer.Exit(int(code))
