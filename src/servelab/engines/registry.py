"""The registry of engine adapters, by name."""

from __future__ import annotations

import difflib

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineAdapter

__all__ = ["ENGINES", "get_adapter", "register"]

ENGINES: dict[str, EngineAdapter] = {}


def register(adapter: EngineAdapter) -> EngineAdapter:
    """Add (or replace) an adapter; later issues and tests add their own."""
    _load_builtin()
    ENGINES[adapter.name] = adapter
    return adapter


def get_adapter(name: str) -> EngineAdapter:
    """The adapter called `name`; an unknown name gets the closest known one as a hint."""
    _load_builtin()
    try:
        return ENGINES[name]
    except KeyError:
        close = difflib.get_close_matches(name, ENGINES, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(ENGINES))}"
        raise ConfigError(f"unknown engine {name!r}", hint=hint) from None


def _load_builtin() -> None:
    """Adapters are imported on first use, so importing servelab stays light."""
    if _builtin_loaded:
        return
    from servelab.engines.embedded import EmbeddedAdapter
    from servelab.engines.openai import OpenAIAdapter
    from servelab.engines.sglang import SGLangAdapter
    from servelab.engines.sim import SimAdapter
    from servelab.engines.transformers_serve import TransformersAdapter
    from servelab.engines.vllm import VLLMAdapter

    globals()["_builtin_loaded"] = True
    builtin = (
        SGLangAdapter(),
        VLLMAdapter(),
        TransformersAdapter(),
        EmbeddedAdapter(),
        SimAdapter(),
        OpenAIAdapter(),
    )
    for adapter in builtin:
        ENGINES.setdefault(adapter.name, adapter)


_builtin_loaded = False
