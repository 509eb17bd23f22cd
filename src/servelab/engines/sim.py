"""The simulator as an engine: started as its own process, like any other engine."""

from __future__ import annotations

import sys
from typing import Any

from servelab.engines.base import PINNING_FIELDS, EngineSpec
from servelab.engines.flagcheck import CliFlags
from servelab.engines.knobs import FlagRule, map_knobs, map_layout, switch, value

__all__ = ["KNOB_FLAGS", "LAYOUT_FLAGS", "SimAdapter"]

LAYOUT_FLAGS: dict[str, FlagRule] = {
    "tp": value("--tp"),
    "pp": value("--pp"),
    "ep": value("--ep"),
    "dp": value("--dp"),
}
"""Parallel sizes of the deployment its `model` profile describes."""

KNOB_FLAGS: dict[str, FlagRule] = {
    "max_running_requests": value("--max-running-requests"),
    "chunked_prefill_size": value("--chunked-prefill-size"),
    "kv_cache_tokens": value("--kv-capacity-tokens"),
    "prefix_cache": switch(off=["--no-prefix-cache"]),
}


class SimAdapter:
    """`servelab sim` in a child process; `spec.options` become its flags."""

    name = "sim"
    description = "servelab's OpenAI-compatible simulator"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"
    pinning_fields: frozenset[str] | None = PINNING_FIELDS
    has_tokenize: bool | None = True
    cli = CliFlags(recorded=None)

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        return spec

    def program(self, spec: EngineSpec) -> list[str]:
        return [sys.executable, "-m", "servelab", "sim"]

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        argv = [*self.program(spec), "--host", host, "--port", str(port)]
        if spec.served_name:
            argv += ["--served-name", spec.served_name]
        for key, option in spec.options.items():
            argv += _flag(key, option)
        argv += map_layout(self.name, spec, LAYOUT_FLAGS)
        argv += map_knobs(self.name, spec, KNOB_FLAGS)
        return argv + list(spec.extra_args)


def _flag(key: str, given: Any) -> list[str]:
    name = "--" + key.replace("_", "-")
    if isinstance(given, bool):
        return [name] if given else [f"--no-{key.replace('_', '-')}"]
    if isinstance(given, list | tuple):
        return [part for item in given for part in (name, str(item))]
    return [name, str(given)]
