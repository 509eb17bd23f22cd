"""A stub engine for the launcher tests: `stub_server.py`, registered as `stub-engine`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from servelab.engines.base import EngineSpec
from servelab.engines.registry import register

STUB = str(Path(__file__).with_name("stub_server.py"))


class StubEngine:
    name = "stub-engine"
    description = "tests/engines/stub_server.py"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    pinning_fields: frozenset[str] | None = frozenset()
    has_tokenize: bool | None = False

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        return spec

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        return [sys.executable, STUB, str(port), json.dumps(spec.options)]


register(StubEngine())
