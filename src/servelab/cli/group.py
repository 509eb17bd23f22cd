"""The `servelab` group: its commands by name, each imported only when it is composed.

Every engine a test or a tune trial starts is `servelab sim ...` or an engine of its own
started by `servelab ...`: a command that imported every other one paid for the
benchmark, report and tuning modules on each start. `compose` builds the group from the
commands it is given, `servelab.cli.main` from the one on the command line alone.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from servelab.cli.exit_codes import ExitCode
from servelab.cli.help_layout import readable_options
from servelab.cli.help_text import unwrap_tree
from servelab.cli.version import print_version

__all__ = ["COMMANDS", "compose"]

COMMANDS: dict[str, tuple[str, str, bool]] = {
    "probe": ("servelab.cli.probe", "probe", False),
    "bench": ("servelab.cli.bench", "bench", False),
    "model": ("servelab.cli.model", "model", False),
    "diagnose": ("servelab.cli.diagnose", "diagnose", False),
    "run": ("servelab.cli.run", "run", False),
    "report": ("servelab.cli.report", "report", False),
    "import": ("servelab.cli.import_cmd", "import_run", False),
    "sim": ("servelab.cli.sim", "sim", False),
    "trace": ("servelab.cli.trace", "trace", False),
    "engine": ("servelab.cli.engine", "engine_app", True),
    "tune": ("servelab.cli.tune", "tune_app", True),
}
"""Each command: its module, the function or Typer app in it, and whether it is a group
of subcommands (joined with `add_typer`); in the order `servelab --help` lists them."""


# Typer may carry its own copy of Click; its exception classes are reached through the
# one it exports, BadParameter (a UsageError, itself a ClickException).
def _base(cls: type[Exception]) -> type[Exception]:
    base = cls.__base__
    if base is None or not issubclass(base, Exception):
        raise TypeError(f"{cls.__name__} is not derived from an exception class")
    return base


_USAGE_ERROR = _base(typer.BadParameter)
_CLICK_ERROR = _base(_USAGE_ERROR)


class _OneLineErrors(TyperGroup):
    """The `servelab` group: Click's errors become one line instead of a box, and every
    command's help is made of paragraphs that wrap at the terminal's width (`help_text`),
    its options laid out so that the help keeps room to be read (`help_layout`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        unwrap_tree(self)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        given = (args, prog_name, complete_var, False, windows_expand_args)
        if not standalone_mode:
            with readable_options():
                return super().main(*given, **extra)
        try:
            with readable_options():
                code = super().main(*given, **extra)
        except _CLICK_ERROR as exc:
            # `servelab` alone: the help was printed while the error was made.
            if type(exc).__name__ != "NoArgsIsHelpError":
                typer.echo(_one_line(exc), err=True)
            sys.exit(int(ExitCode.USAGE))
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(int(ExitCode.INTERNAL))
        sys.exit(code if isinstance(code, int) else int(ExitCode.OK))


def _one_line(exc: Exception) -> str:
    """`error: <Click's message> (see '<command> --help')`, on one line."""
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    context = getattr(exc, "ctx", None)
    command = f"{context.command_path} " if context is not None else ""
    return f"error: {message.rstrip('.')} (see '{command}--help')"


def _servelab(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print servelab's version and the installed engines' (transformers, vLLM, "
            "SGLang), then exit.",
            callback=print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """The options of `servelab` itself, before a command."""


def compose(names: Iterable[str]) -> typer.Typer:
    """The `servelab` group with the named commands (every one for the help)."""
    app = typer.Typer(
        name="servelab",
        help="The performance lab for LLM serving deployments.",
        cls=_OneLineErrors,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_servelab)
    for name in names:
        module, attribute, group = COMMANDS[name]
        target = getattr(importlib.import_module(module), attribute)
        if group:
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    return app
