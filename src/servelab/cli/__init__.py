"""The `servelab` command: each command lives in its own module, composed here.

A command with subcommands (a later `engine up/down/logs`) gets a Typer app of its own
and joins with `add_typer`; a single command is registered directly, so a stray
argument is reported as such instead of as an unknown subcommand.

Click's usage errors (an unknown option or command, a missing argument, a value of the
wrong type or outside a choice) are one `error: ...` line on stderr and exit code 2, like
every bad value servelab itself refuses; `servelab` alone still prints the help.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from servelab.cli.bench import bench
from servelab.cli.diagnose import diagnose
from servelab.cli.engine import engine_app
from servelab.cli.exit_codes import ExitCode
from servelab.cli.help_layout import readable_options
from servelab.cli.help_text import unwrap_tree
from servelab.cli.import_cmd import import_run
from servelab.cli.model import model
from servelab.cli.probe import probe
from servelab.cli.report import report
from servelab.cli.run import run
from servelab.cli.sim import sim
from servelab.cli.trace import trace
from servelab.cli.tune import tune_app
from servelab.cli.version import print_version

__all__ = ["app", "main"]


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


app = typer.Typer(
    name="servelab",
    help="The performance lab for LLM serving deployments.",
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
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


app.command("probe")(probe)
app.command("bench")(bench)
app.command("model")(model)
app.command("diagnose")(diagnose)
app.command("run")(run)
app.command("report")(report)
app.command("import")(import_run)
app.command("sim")(sim)
app.command("trace")(trace)
app.add_typer(engine_app, name="engine")
app.add_typer(tune_app, name="tune")


def main() -> None:
    """Console-script entry point."""
    app()
