"""The trial moved to `servelab.bench.trial`; `engine_fields` stays for the callers that
still spread it into a BenchConfig, until they call `for_engine`."""

from __future__ import annotations

from typing import Any

from servelab.bench.session import BenchConfig
from servelab.bench.trial import for_engine
from servelab.engines.launcher import RunningEngine

__all__ = ["engine_fields"]

_ENGINE_FIELDS = (
    "url",
    "model",
    "tokenizer",
    "pinning_fields",
    "has_tokenize",
    "engine",
    "metrics_url",
)


def engine_fields(engine: RunningEngine, *, metrics: bool) -> dict[str, Any]:
    """The BenchConfig fields `for_engine` sets, as keywords."""
    aimed = for_engine(BenchConfig(url=engine.url), engine, metrics=metrics)
    return {name: getattr(aimed, name) for name in _ENGINE_FIELDS}
