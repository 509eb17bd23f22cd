"""Actions in the engine's own words: a knob and its value, turned into that engine's flags.

The flags come from the adapters' knob maps (`servelab.engines.<engine>.KNOB_FLAGS`),
the same tables `servelab engine` launches with, so an action can be pasted into a
launch command or an engine spec. An unknown engine gets the servelab knob instead.
Each helper sets what its actions change (`ActionTarget`): the engine's knobs and layout
are `engine`, a bench option is `load`, a sentence is `outside` unless its rule says.
"""

from __future__ import annotations

from typing import Any

from servelab.diagnose.engineconf import EngineConfig
from servelab.diagnose.findings import Action, ActionTarget

__all__ = ["bench_action", "flag_name_action", "knob_action", "layout_action", "text_action"]


def knob_action(conf: EngineConfig, knob: str, value: Any, why: str) -> Action:
    """`why`, then how to say `knob = value` to this engine."""
    flags = conf.flags(knob, value)
    if flags is None:
        if conf.knobs:
            return _absent(conf, knob, why, value)
        text = f"{why}: knob {knob}={_value(value)} (give --engine for the engine's own flag)"
        return Action(target=ActionTarget.ENGINE, text=text, knob=knob, value=value)
    if not flags:
        other = conf.flags(knob, not value) if isinstance(value, bool) else None
        how = f"the default; remove {' '.join(other)} if set" if other else "the default"
        return Action(
            target=ActionTarget.ENGINE,
            text=f"{why}: {how}",
            knob=knob,
            value=value,
            engine=conf.name,
        )
    return Action(
        target=ActionTarget.ENGINE,
        text=f"{why}: {' '.join(flags)}",
        knob=knob,
        value=value,
        engine=conf.name,
        flags=flags,
    )


def flag_name_action(conf: EngineConfig, knob: str, why: str) -> Action:
    """An action on a knob whose right value the run cannot tell: its flag, no value."""
    flags = conf.flags(knob, 0)
    if flags:
        return Action(
            target=ActionTarget.ENGINE,
            text=f"{why}: {flags[0]}",
            knob=knob,
            engine=conf.name,
            flags=flags[:1],
        )
    if conf.knobs:
        return _absent(conf, knob, why)
    return Action(
        target=ActionTarget.ENGINE,
        text=f"{why}: knob {knob} (give --engine for the engine's own flag)",
        knob=knob,
    )


def _absent(conf: EngineConfig, knob: str, why: str, value: Any = None) -> Action:
    """An action this engine has no setting for: said so, and marked unavailable."""
    text = f"{why}: not possible on {conf.name}, which has no setting for {knob}"
    return Action(target=ActionTarget.ENGINE, text=text, knob=knob, value=value, available=False)


def layout_action(conf: EngineConfig, change: dict[str, int], why: str) -> Action:
    """A new parallel layout (several sizes at once) in the engine's flags."""
    label = ",".join(f"{key}={value}" for key, value in change.items())
    flags: list[str] = []
    for key, size in change.items():
        rule = conf.layout.get(key)
        if rule is None:
            return Action(
                target=ActionTarget.ENGINE,
                text=f"{why}: layout {label} (give --engine for the engine's flags)",
            )
        flags += rule(size) if size > 1 else []
    return Action(
        target=ActionTarget.ENGINE,
        text=f"{why}: {' '.join(flags)}",
        knob="layout",
        value=label,
        engine=conf.name,
        flags=flags,
    )


def bench_action(option: str, value: Any, why: str) -> Action:
    """A `servelab bench` option (a measurement setting, not the engine's)."""
    return Action(
        text=f"{why}: servelab bench {option} {_value(value)}",
        target=ActionTarget.LOAD,
        knob=option.lstrip("-"),
        value=value,
        flags=[option, _value(value)],
    )


def text_action(text: str, target: ActionTarget = ActionTarget.OUTSIDE) -> Action:
    """Something to do that no flag says (fix the machine, tune a kernel, read a log); a
    rule whose sentence names an engine setting or the load says so with `target`."""
    return Action(text=text, target=target)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
