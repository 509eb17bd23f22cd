"""The `servelab` command: each command lives in its own module, composed here.

A command with subcommands (a later `engine up/down/logs`) gets a Typer app of its own
and joins with `add_typer`; a single command is registered directly, so a stray
argument is reported as such instead of as an unknown subcommand.

Click's usage errors (an unknown option or command, a missing argument, a value of the
wrong type or outside a choice) are one `error: ...` line on stderr and exit code 2, like
every bad value servelab itself refuses; `servelab` alone still prints the help.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from servelab.cli.group import COMMANDS, compose

__all__ = ["app", "main"]


@functools.cache
def _whole() -> Any:
    return compose(COMMANDS)


def __getattr__(name: str) -> Any:
    """`app`: the whole group, composed on first use."""
    if name == "app":
        return _whole()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point: a command named first is composed alone, so it starts
    without importing the others; anything else (the help, a misspelt command, an option
    of `servelab` itself) gets the whole group."""
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    app = compose([command]) if command in COMMANDS else _whole()
    app()
