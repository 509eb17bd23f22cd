"""Any OpenAI-compatible endpoint, by URL: nothing is launched, nothing is assumed."""

from __future__ import annotations

from servelab.core.errors import EngineLaunchError
from servelab.engines.base import EngineSpec

__all__ = ["OpenAIAdapter"]


class OpenAIAdapter:
    """An endpoint servelab attaches to; what it accepts is learned by probing it."""

    name = "openai"
    description = "an existing OpenAI-compatible endpoint, given by --url"
    launches = False
    health_path = "/v1/models"
    pinning_fields: frozenset[str] | None = None
    has_tokenize: bool | None = None

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        return spec

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        raise EngineLaunchError("an openai endpoint is given by URL and never launched")
