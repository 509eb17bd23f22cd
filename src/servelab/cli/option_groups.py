"""Option groups: options that several commands take, declared once as the fields of one
dataclass, so that adding an option to all of them is adding one field.

Typer reads a command's options from its parameters, one parameter each. A command
decorated with `with_option_groups` may instead take a parameter annotated with a
group: Typer is shown the group's fields as options in that parameter's place, and the
command receives their values gathered back into the group::

    @dataclass(frozen=True)
    class Telemetry(OptionGroup):
        gpus: Gpus = None

    @with_option_groups
    def bench(*, url: Url = None, telemetry: Telemetry) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from typing import Any, ClassVar, Self, TypeVar, get_type_hints

__all__ = ["OptionGroup", "with_option_groups"]

_Result = TypeVar("_Result")


class OptionGroup:
    """The base of a frozen dataclass whose fields are options, each declared as a
    command's parameter would be: `name: Annotated[type, typer.Option(...)] = default`."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @classmethod
    def parameters(cls) -> list[inspect.Parameter]:
        """The fields as the parameters Typer reads options from."""
        hints = get_type_hints(cls, include_extras=True)
        return [
            inspect.Parameter(
                field.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if field.default is MISSING else field.default,
                annotation=hints[field.name],
            )
            for field in fields(cls)
        ]

    @classmethod
    def gather(cls, options: dict[str, Any]) -> Self:
        """The group of its options' values, taken out of `options`."""
        return cls(**{field.name: options.pop(field.name) for field in fields(cls)})


def with_option_groups(command: Callable[..., _Result]) -> Callable[..., _Result]:
    """`command` with each parameter annotated with an OptionGroup shown to Typer as the
    group's options, in the parameter's place, and passed to `command` as the group."""
    signature = inspect.signature(command, eval_str=True)
    groups: dict[str, type[OptionGroup]] = {}
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        group = parameter.annotation
        if isinstance(group, type) and issubclass(group, OptionGroup):
            groups[parameter.name] = group
            parameters += group.parameters()
        else:
            # Keyword-only, as Typer passes them: an argument without a default may then
            # follow a group's options.
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(command)
    def gathered(**options: Any) -> _Result:
        for name, group in groups.items():
            options[name] = group.gather(options)
        return command(**options)

    # Typer reads the signature and the annotations of what it is given.
    shown = signature.replace(parameters=parameters)  # two options of one name raise here
    gathered.__signature__ = shown  # type: ignore[attr-defined]
    gathered.__annotations__ = {p.name: p.annotation for p in parameters}
    return gathered
