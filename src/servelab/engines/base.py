"""The engine adapter protocol and the spec an engine is launched from.

An adapter knows three things about an engine: how to start it (`prepare` then
`command`), how to tell it is ready (`health_path`), and which request fields it
accepts (`pinning_fields`, `has_tokenize`), so the load generator only sends what the
engine understands.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DEFAULT_STARTUP_TIMEOUT_S",
    "PINNING_FIELDS",
    "EngineAdapter",
    "EngineSpec",
]

DEFAULT_STARTUP_TIMEOUT_S = 600.0

# Request fields that pin the output length; sent only to engines that accept them.
PINNING_FIELDS: frozenset[str] = frozenset({"ignore_eos", "min_tokens"})


class EngineSpec(BaseModel):
    """What to launch: the engine, its model, and engine-specific options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str = Field(description="Adapter name in the registry: embedded, sim, openai.")
    model: str | None = Field(
        default=None, description="Model path, hub id, or preset name (embedded)."
    )
    served_name: str | None = Field(default=None, description="Name the model is served under.")
    url: str | None = Field(default=None, description="Endpoint of an engine not launched here.")
    device: str | None = Field(default=None, description="Device for engines that take one.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment added on launch.")
    extra_args: list[str] = Field(default_factory=list, description="Native flags passed through.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Adapter-specific settings (the simulator's timings)."
    )
    startup_timeout_s: float = Field(default=DEFAULT_STARTUP_TIMEOUT_S, gt=0)


@runtime_checkable
class EngineAdapter(Protocol):
    """One serving engine, as the launcher and the load generator see it."""

    name: str
    description: str
    launches: bool
    """False for endpoints servelab attaches to rather than starts."""
    health_path: str
    pinning_fields: frozenset[str] | None
    """Accepted output-pinning fields; None when unknown (the client probes and drops)."""
    has_tokenize: bool | None
    """Whether POST /tokenize exists; None when unknown (the client asks)."""

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        """Make what the engine needs (model files...) and return the spec to launch."""
        ...

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        """The argv that starts the engine on host:port."""
        ...
