"""Option groups: one declaration, the same options on every command that takes the group."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from servelab.cli import app
from servelab.cli.option_groups import OptionGroup, with_option_groups
from servelab.cli.shared_options import SharedOptions
from servelab.cli.spec_options import SpecOptions


@dataclass(frozen=True)
class _Load(OptionGroup):
    rate: Annotated[float, typer.Option(help="Requests per second.")] = 1.0
    label: Annotated[str | None, typer.Option("--name", help="A name.")] = None


def test_a_group_is_options_in_its_place_and_one_value_in_the_command():
    seen: list[tuple[str, _Load, bool]] = []

    @with_option_groups
    def command(
        path: Annotated[str, typer.Argument()],
        *,
        load: _Load,
        quiet: Annotated[bool, typer.Option()] = False,
    ) -> None:
        seen.append((path, load, quiet))

    probe = typer.Typer(add_completion=False)
    probe.command()(command)
    names = [param.name for param in get_command(probe).params]
    result = CliRunner().invoke(probe, ["p", "--rate", "2.5", "--quiet"])

    assert result.exit_code == 0, result.output
    assert names == ["path", "rate", "label", "quiet"]
    assert seen == [("p", _Load(rate=2.5, label=None), True)]


def test_an_option_of_a_group_and_of_the_command_of_one_name_is_refused_at_once():
    def command(*, load: _Load, rate: float = 0.0) -> None: ...

    with pytest.raises(ValueError, match="duplicate parameter name: 'rate'"):
        with_option_groups(command)


def _params(*path: str) -> dict[str, dict[str, object]]:
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {
        param.name: {
            "opts": param.opts,
            "secondary": param.secondary_opts,
            "default": param.default,
            "help": getattr(param, "help", None),
        }
        for param in command.params
        if param.name is not None
    }


@pytest.mark.parametrize(
    ("group", "commands"),
    [
        (SharedOptions, [("bench",), ("run",), ("tune", "run"), ("tune", "join")]),
        (SpecOptions, [("engine", "check"), ("engine", "up")]),
    ],
)
def test_every_command_of_a_group_takes_its_options_alike(group, commands):
    shown = [_params(*command) for command in commands]
    for field in fields(group):
        declared = [params[field.name] for params in shown]
        assert declared == [declared[0]] * len(commands), field.name
