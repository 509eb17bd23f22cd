"""Turning a spec's layout and knobs into one engine's own flags.

Each adapter declares a table: for every knob it supports, a function from the value
to flags. A knob or a parallel size that is set but missing from the table is a
ConfigError naming the engine and the knob, never a silent drop. Values equal to the
engine's default (a size of 1, CUDA graphs on where they are on by default) add no
flag, so the command stays the one a person would write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec

__all__ = ["FlagRule", "flag_value", "map_knobs", "map_layout", "switch", "value"]

FlagRule = Callable[[Any], list[str]]
"""A knob's value to the flags that say it."""


def value(flag: str) -> FlagRule:
    """`flag VALUE`."""
    return lambda given: [flag, _text(given)]


def switch(*, on: list[str] | None = None, off: list[str] | None = None) -> FlagRule:
    """A boolean knob: the flags for true and for false (empty: the engine's default)."""
    return lambda given: list(on or []) if given else list(off or [])


def map_layout(
    engine: str,
    spec: EngineSpec,
    table: Mapping[str, FlagRule],
    *,
    hints: Mapping[str, str] | None = None,
) -> list[str]:
    """Flags for tp, pp, ep, dp; a size above 1 the engine cannot take is a ConfigError."""
    argv: list[str] = []
    for name, size in spec.layout.items():
        if size == 1:
            continue
        rule = table.get(name)
        if rule is None:
            raise _missing(engine, f"{name}={size}", (hints or {}).get(name))
        argv += rule(size)
    return argv


def map_knobs(
    engine: str,
    spec: EngineSpec,
    table: Mapping[str, FlagRule],
    *,
    hints: Mapping[str, str] | None = None,
) -> list[str]:
    """Flags for every knob the spec sets; one the engine lacks is a ConfigError."""
    argv: list[str] = []
    for name, given in spec.knobs.given().items():
        rule = table.get(name)
        if rule is None:
            raise _missing(engine, name, (hints or {}).get(name))
        argv += rule(given)
    return argv


def _missing(engine: str, what: str, hint: str | None) -> ConfigError:
    return ConfigError(
        f"engine {engine!r} has no setting for knob {what}",
        hint=hint or "remove it, or pass the engine's own flag in extra_args",
    )


def _text(given: Any) -> str:
    if isinstance(given, float):
        return repr(given)
    return str(given)


def flag_value(command: Sequence[str], flag: str) -> str | None:
    """The value a command line gives `flag` (`--flag VALUE` or `--flag=VALUE`), or None."""
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None
