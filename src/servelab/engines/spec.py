"""Reading an engine spec from YAML and from command-line values, with one-line errors.

The YAML file holds the fields of `EngineSpec`:

    engine: sglang
    model: /models/GLM-5-NVFP4
    served_name: glm-5
    port: 8000
    tp: 8                       # or layout: {tp: 8}
    knobs: {max_running_requests: 1024, cuda_graphs: true, prefix_cache: false}
    env: {NCCL_IB_DISABLE: "1"}
    extra_args: ["--moe-runner-backend", "flashinfer_cutlass"]

An unknown key is reported with the closest known one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from servelab.core.errors import ConfigError
from servelab.engines.base import KNOB_NAMES, EngineSpec

__all__ = [
    "computes_on_cpu",
    "load_spec",
    "parse_assignments",
    "parse_spec",
    "spec_with",
    "spec_yaml",
]


def computes_on_cpu(spec: EngineSpec) -> bool:
    """Whether the engine computes on the CPU: its device where the spec names one, else
    the embedded engine's preset's (an engine on the CPU holds no GPU, whatever its layout
    says, and the probe measures the CPU's rates for it)."""
    if spec.device is not None:
        return spec.device == "cpu"
    if spec.engine != "embedded":
        return False
    from servelab.engines.embedded.presets import DEFAULT_PRESET, get_preset

    try:
        return get_preset(spec.model or DEFAULT_PRESET).device == "cpu"
    except ConfigError:
        return False


def load_spec(path: Path) -> EngineSpec:
    """The spec in the YAML file at `path`."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no engine spec at {path}") from None
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, or a NUL in the path
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{path} is not YAML: {problem}{where}") from None
    except _YAML_VALUE_ERRORS as exc:
        raise ConfigError(f"{path} is not a spec: {_yaml_value_problem(exc)}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path} is not a mapping of spec keys (engine: ..., model: ...)")
    return parse_spec(document, source=str(path))


def spec_yaml(spec: EngineSpec) -> str:
    """The spec as the YAML a user would write: set fields only, secrets hidden (env values
    and options by name, `--api-key VALUE` and `--hf-token=VALUE` in extra_args, URL
    passwords), since it is recorded in run directories and tuning studies."""
    import yaml

    from servelab.core.redact import redact_document

    data = redact_document(spec.model_dump(mode="json", exclude_defaults=True))
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def parse_spec(data: dict[str, Any], *, source: str) -> EngineSpec:
    """Validate `data` as a spec; the first problem becomes a one-line ConfigError."""
    try:
        return EngineSpec.model_validate(data)
    except ValidationError as exc:
        raise _one_line(exc, source) from None


def spec_with(
    base: EngineSpec | None,
    *,
    fields: dict[str, Any],
    knobs: dict[str, Any],
    env: dict[str, str],
    extra_args: list[str],
    source: str,
) -> EngineSpec:
    """`base` (or nothing) with command-line values on top: fields and knobs replace,
    env is merged, extra_args are appended."""
    data: dict[str, Any] = base.model_dump(exclude_defaults=True) if base else {}
    data.update({key: given for key, given in fields.items() if given is not None})
    if knobs:
        data["knobs"] = {**data.get("knobs", {}), **knobs}
    if env:
        data["env"] = {**data.get("env", {}), **env}
    if extra_args:
        data["extra_args"] = [*data.get("extra_args", []), *extra_args]
    if "engine" not in data:
        raise ConfigError("no engine given", hint="pass a spec file or --engine")
    return parse_spec(data, source=source)


def parse_assignments(items: Iterable[str], *, option: str, typed: bool) -> dict[str, Any]:
    """`KEY=VALUE` strings; with `typed`, values read as YAML scalars (true, 1024, 0.9)."""
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} {item!r} is not KEY=VALUE")
        parsed[key.strip()] = _scalar(text) if typed else text
    return parsed


def _scalar(text: str) -> Any:
    import yaml

    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, *_YAML_VALUE_ERRORS):
        return text
    return value if isinstance(value, str | int | float | bool) else text


# Besides YAMLError, PyYAML lets through a date that does not exist (2001-02-30: the
# datetime constructor's ValueError) and nesting deeper than Python's recursion limit.
_YAML_VALUE_ERRORS = (ValueError, RecursionError)


def _yaml_value_problem(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return f"a value YAML cannot read ({exc})"


def _one_line(exc: ValidationError, source: str) -> ConfigError:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    if error["type"] == "extra_forbidden":
        *parent, key = loc
        known = KNOB_NAMES if parent == ["knobs"] else _top_level_keys()
        where = f" in {'.'.join(parent)}" if parent else ""
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        return ConfigError(f"{source}: unknown key {key!r}{where}{more}", hint=hint)
    message = error["msg"].removeprefix("Value error, ")
    where = ".".join(loc) if loc else "spec"
    return ConfigError(f"{source}: {where}: {message}{more}")


def _top_level_keys() -> list[str]:
    return [*EngineSpec.model_fields, "layout"]
