"""The simulator as an engine: started as its own process, like any other engine."""

from __future__ import annotations

import sys
from typing import Any

from servelab.engines.base import PINNING_FIELDS, EngineSpec

__all__ = ["SimAdapter"]


class SimAdapter:
    """`servelab sim` in a child process; `spec.options` become its flags."""

    name = "sim"
    description = "servelab's OpenAI-compatible simulator"
    launches = True
    health_path = "/health"
    pinning_fields: frozenset[str] | None = PINNING_FIELDS
    has_tokenize: bool | None = True

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        return spec

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        argv = [sys.executable, "-m", "servelab", "sim", "--host", host, "--port", str(port)]
        if spec.served_name:
            argv += ["--served-name", spec.served_name]
        for key, value in spec.options.items():
            argv += _flag(key, value)
        return argv + list(spec.extra_args)


def _flag(key: str, value: Any) -> list[str]:
    name = "--" + key.replace("_", "-")
    if isinstance(value, bool):
        return [name] if value else [f"--no-{key.replace('_', '-')}"]
    if isinstance(value, list | tuple):
        return [part for item in value for part in (name, str(item))]
    return [name, str(value)]
