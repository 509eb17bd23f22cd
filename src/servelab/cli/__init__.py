"""The `servelab` command: each command lives in its own module, composed here.

A command with subcommands (a later `engine up/down/logs`) gets a Typer app of its own
and joins with `add_typer`; a single command is registered directly, so a stray
argument is reported as such instead of as an unknown subcommand.
"""

from __future__ import annotations

import typer

from servelab.cli.bench import bench
from servelab.cli.engine import engine_app
from servelab.cli.model import model
from servelab.cli.probe import probe
from servelab.cli.run import run
from servelab.cli.sim import sim

__all__ = ["app", "main"]

app = typer.Typer(
    name="servelab",
    help="The performance lab for LLM serving deployments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("probe")(probe)
app.command("bench")(bench)
app.command("model")(model)
app.command("run")(run)
app.command("sim")(sim)
app.add_typer(engine_app, name="engine")


def main() -> None:
    """Console-script entry point."""
    app()
