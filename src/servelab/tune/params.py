"""One searched setting: where it lives in a spec, its candidates, and how to set it.

A parameter's path says which part of the engine spec it changes:

- `knobs.NAME`: a servelab knob (mapped to each engine's own flag);
- `tp`, `pp`, `ep`, `dp`: one parallel size; `layout`: whole layouts ({tp: 4, pp: 2});
- `env.NAME`: an environment variable (null unsets it);
- `args.--flag`: a native flag: true adds it alone, false or null leaves it out, any other
  value follows it; the base's own occurrence of the flag is replaced;
- `options.NAME`: an adapter setting (the simulator's timings, ...).
"""

from __future__ import annotations

import difflib
import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from servelab.core.errors import ConfigError
from servelab.engines.base import KNOB_NAMES, LAYOUT_NAMES, EngineSpec
from servelab.engines.spec import parse_spec
from servelab.tune.results import ParamValue

if TYPE_CHECKING:
    import optuna

__all__ = ["MAX_GRID_STEPS", "Param", "apply_params", "layout_label", "param_from_yaml"]

MAX_GRID_STEPS = 64
"""An int range with more values than this is searched, never listed."""

Kind = Literal["categorical", "int", "float"]


class Param(BaseModel):
    """A parameter of the space, its base value always among its candidates."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: Kind
    choices: list[ParamValue] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    base_value: ParamValue = None

    def suggest(self, trial: optuna.Trial) -> ParamValue:
        """The trial's value, drawn by the sampler (or fixed by an enqueued trial)."""
        if self.kind == "categorical":
            assert self.choices is not None
            return trial.suggest_categorical(self.path, self.choices)
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            step = int(self.step) if self.step is not None else 1
            return trial.suggest_int(
                self.path, int(self.low), int(self.high), step=step, log=self.log
            )
        return trial.suggest_float(self.path, self.low, self.high, step=self.step, log=self.log)

    def grid_values(self) -> list[ParamValue] | None:
        """Every candidate, when they can be listed (the grid sampler's space)."""
        if self.kind == "categorical":
            return list(self.choices or [])
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            step = int(self.step or 1)
            count = (int(self.high) - int(self.low)) // step + 1
            if self.log or count > MAX_GRID_STEPS:
                return None
            return list(range(int(self.low), int(self.high) + 1, step))
        if self.step is None or self.log:
            return None
        count = math.floor((self.high - self.low) / self.step + 1e-9) + 1
        if count > MAX_GRID_STEPS:
            return None
        return [round(self.low + i * self.step, 12) for i in range(count)]

    def grid_size(self) -> int | None:
        values = self.grid_values()
        return len(values) if values is not None else None

    def contains(self, value: ParamValue) -> bool:
        """Whether `value` is a candidate (a diagnose action must be, to become a trial)."""
        if self.kind == "categorical":
            return value in (self.choices or [])
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        assert self.low is not None and self.high is not None
        if not self.low <= value <= self.high:
            return False
        if self.kind == "int":
            return value == int(value) and (int(value) - int(self.low)) % int(self.step or 1) == 0
        return True

    def text(self) -> str:
        if self.kind == "categorical":
            return f"{self.path} in {_values_text(self.choices or [])}"
        scale = ", log" if self.log else ""
        step = f" step {self.step:g}" if self.step is not None else ""
        return f"{self.path} in [{self.low:g}, {self.high:g}]{step}{scale}"


def param_from_yaml(path: str, given: Any, base: EngineSpec, *, source: str) -> Param:
    """The parameter at `path` from its YAML (a list, or {low, high, step, log})."""
    where = f"{source}: space.{path}"
    _check_path(path, where)
    base_value = base_value_of(base, path)
    if isinstance(given, list):
        param = _categorical(path, given, base_value, where)
    elif isinstance(given, dict):
        param = _range(path, given, base_value, where)
    else:
        raise ConfigError(f"{where}: give a list of values or a range {{low: ..., high: ...}}")
    _check_candidates(param, base, where)
    return param


def apply_params(base: EngineSpec, values: dict[str, ParamValue]) -> EngineSpec:
    """The base spec with each parameter's value set; a value the spec refuses is a
    ConfigError naming it."""
    data = base.model_dump(exclude_defaults=True)
    extra_args = list(base.extra_args)
    for path, value in values.items():
        family, _, name = path.partition(".")
        if path == "layout":
            for key in LAYOUT_NAMES:
                data.pop(key, None)
            data.update(_layout_sizes(str(value)))
        elif path in LAYOUT_NAMES:
            data[path] = value
        elif family == "knobs":
            knobs = dict(data.get("knobs", {}))
            knobs[name] = value
            data["knobs"] = {k: v for k, v in knobs.items() if v is not None}
        elif family == "env":
            env = dict(data.get("env", {}))
            env.pop(name, None)
            if value is not None:
                env[name] = _text(value)
            data["env"] = env
        elif family == "options":
            options = dict(data.get("options", {}))
            options.pop(name, None)
            if value is not None:
                options[name] = value
            data["options"] = options
        elif family == "args":
            extra_args = _without_flag(extra_args, name) + _flag_args(name, value)
    data["extra_args"] = extra_args
    return parse_spec(data, source="the trial's settings")


def layout_label(sizes: dict[str, int]) -> str:
    """tp=4,pp=2: the sizes above 1, tensor parallel always named."""
    parts = [
        f"{key}={int(sizes.get(key, 1))}"
        for key in LAYOUT_NAMES
        if key == "tp" or int(sizes.get(key, 1)) != 1
    ]
    return ",".join(parts)


def layout_of(spec: EngineSpec) -> dict[str, int]:
    return {key: int(getattr(spec, key)) for key in LAYOUT_NAMES}


def base_value_of(base: EngineSpec, path: str) -> ParamValue:
    """What the base spec sets at `path` (None: nothing, the engine's default)."""
    family, _, name = path.partition(".")
    if path == "layout":
        return layout_label(layout_of(base))
    if path in LAYOUT_NAMES:
        return int(getattr(base, path))
    if family == "knobs":
        value: ParamValue = getattr(base.knobs, name)
        return value
    if family == "env":
        return base.env.get(name)
    if family == "options":
        option = base.options.get(name)
        return option if isinstance(option, str | int | float | bool) else None
    return _flag_value(base.extra_args, name)


def _check_path(path: str, where: str) -> None:
    family, dot, name = path.partition(".")
    if path == "layout" or path in LAYOUT_NAMES:
        return
    if family == "knobs" and dot:
        if name not in KNOB_NAMES:
            close = difflib.get_close_matches(name, KNOB_NAMES, n=1)
            hint = f"did you mean knobs.{close[0]}?" if close else f"known: {', '.join(KNOB_NAMES)}"
            raise ConfigError(f"{where}: no knob {name!r}", hint=hint)
        return
    if family in ("env", "options") and name:
        return
    if family == "args" and name.startswith("-") and name.strip("-"):
        return
    raise ConfigError(
        f"{where}: not a parameter path",
        hint="knobs.NAME, tp, pp, ep, dp, layout, env.NAME, args.--flag or options.NAME",
    )


def _categorical(path: str, given: list[Any], base_value: ParamValue, where: str) -> Param:
    if not given:
        raise ConfigError(f"{where}: an empty list has nothing to try")
    if path == "layout":
        choices: list[ParamValue] = [_layout_choice(item, where) for item in given]
    else:
        choices = [_scalar(item, where) for item in given]
        if path in LAYOUT_NAMES and any(
            isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in choices
        ):
            raise ConfigError(f"{where}: parallel sizes are whole numbers from 1")
    if len(set(map(repr, choices))) != len(choices):
        raise ConfigError(f"{where}: a value is listed twice")
    if path.startswith("args.") and base_value is None and False in choices:
        base_value = False
    if base_value not in choices:
        choices.append(base_value)
    return Param(path=path, kind="categorical", choices=choices, base_value=base_value)


def _range(path: str, given: dict[str, Any], base_value: ParamValue, where: str) -> Param:
    unknown = set(given) - {"low", "high", "step", "log"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown, key=str)[0]!r} in a range")
    low, high, step = given.get("low"), given.get("high"), given.get("step")
    log = given.get("log", False)
    numbers = [v for v in (low, high, step) if v is not None]
    if low is None or high is None:
        raise ConfigError(f"{where}: a range needs low and high")
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in numbers):
        raise ConfigError(f"{where}: low, high and step are numbers")
    if not all(math.isfinite(v) and abs(v) < 1e15 for v in numbers) or not isinstance(log, bool):
        raise ConfigError(f"{where}: low, high and step are finite numbers; log is true/false")
    if low >= high:
        raise ConfigError(f"{where}: low must be below high")
    if step is not None and (step <= 0 or log):
        raise ConfigError(f"{where}: step must be positive, and cannot go with log")
    if log and low <= 0:
        raise ConfigError(f"{where}: a log range starts above 0")
    if base_value is None:
        raise ConfigError(
            f"{where}: the base sets no value here, so its own trial would not lie in the range",
            hint="set it in base, or list values (null among them for the engine's default)",
        )
    if isinstance(base_value, bool) or not isinstance(base_value, int | float):
        raise ConfigError(f"{where}: the base's value {base_value!r} is not a number")
    integer = all(isinstance(v, int) for v in numbers) and isinstance(base_value, int)
    if path in LAYOUT_NAMES and not integer:
        raise ConfigError(f"{where}: parallel sizes are whole numbers")
    return Param(
        path=path,
        kind="int" if integer else "float",
        low=min(low, base_value),
        high=max(high, base_value),
        step=step,
        log=log,
        base_value=base_value,
    )


def _check_candidates(param: Param, base: EngineSpec, where: str) -> None:
    """Every listed value (a range's ends) must make a valid spec with the base."""
    values = param.choices if param.kind == "categorical" else [param.low, param.high]
    for value in values or []:
        if param.kind == "int" and value is not None:
            value = int(value)
        try:
            apply_params(base, {param.path: value})
        except ConfigError as exc:
            raise ConfigError(f"{where}: {value!r} does not make a valid spec ({exc})") from None


def _layout_choice(item: Any, where: str) -> str:
    if isinstance(item, str):
        item = _layout_sizes(item, where=where)
    if not isinstance(item, dict) or not item:
        raise ConfigError(f"{where}: a layout is a mapping such as {{tp: 4, pp: 2}}")
    unknown = set(item) - set(LAYOUT_NAMES)
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown, key=str)[0]!r} in a layout")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in item.values()):
        raise ConfigError(f"{where}: parallel sizes are whole numbers from 1")
    return layout_label(item)


def _layout_sizes(label: str, *, where: str = "layout") -> dict[str, int]:
    sizes: dict[str, int] = {}
    for part in label.split(","):
        key, _, number = part.strip().partition("=")
        if key not in LAYOUT_NAMES or not number.isdigit():
            raise ConfigError(f"{where}: {label!r} is not a layout such as tp=4,pp=2")
        sizes[key] = int(number)
    return sizes


def _scalar(item: Any, where: str) -> ParamValue:
    if item is None or isinstance(item, str | bool | int):
        return item
    if isinstance(item, float) and math.isfinite(item):
        return item
    raise ConfigError(f"{where}: values are strings, numbers, true/false or null, not {item!r}")


def _text(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _flag_args(flag: str, value: ParamValue) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    return [flag, str(value)]


def _flag_value(args: list[str], flag: str) -> ParamValue:
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return _typed(arg.split("=", 1)[1])
        if arg == flag:
            following = args[i + 1] if i + 1 < len(args) else None
            if following is None or following.startswith("--"):
                return True
            return _typed(following)
    return None


def _without_flag(args: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith(flag + "="):
            continue
        if arg == flag:
            following = args[i + 1] if i + 1 < len(args) else None
            skip = following is not None and not following.startswith("--")
            continue
        out.append(arg)
    return out


def _typed(text: str) -> ParamValue:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _values_text(values: list[ParamValue]) -> str:
    return "{" + ", ".join("default" if v is None else str(v) for v in values) + "}"
